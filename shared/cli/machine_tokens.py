"""The machine's shared secrets in the environment files the systemd units in `deploy/` read.

One VM runs `flux7.service` (every role) and, beside it, `sup7.service`. They share two secrets:
`MESH_ADMIN_TOKEN` (the control plane's bearer: the console, `mesh`, sup7) and `MEM7_TOKEN` (the memory routes'
bearer), and optionally the memory scopes file (`MEM7_SCOPES`). `flux7 token enable` writes them into
`<root>/etc/flux7/flux7.env` and `<root>/etc/flux7/sup7.env` (mode 0600), generating what is missing and keeping
what is there, so running it twice changes nothing; `rotate` replaces them; `show` says where they are.
Every other line of an environment file is kept as it was."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ADMIN", "MEMORY", "SECRETS", "EnvFile", "MachineTokens"]

ADMIN = "MESH_ADMIN_TOKEN"
MEMORY = "MEM7_TOKEN"
SCOPES = "MEM7_SCOPES"
SECRETS = (ADMIN, MEMORY)
# The example file's placeholders (deploy/flux7.env.example) count as unset.
_PLACEHOLDER = re.compile(r"^(change-me.*|)$")
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _unquote(raw: str) -> str:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


class EnvFile:
    """A systemd EnvironmentFile: `KEY=value` lines, comments and blanks kept in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = path.read_text().splitlines() if path.exists() else []

    def get(self, key: str) -> str:
        for line in self.lines:
            m = _LINE.match(line)
            if m and m.group(1) == key:
                return _unquote(m.group(2))
        return ""

    def set(self, key: str, value: str) -> bool:
        """Set `key` (the first assignment, or a new line at the end); True when the file changes."""
        for i, line in enumerate(self.lines):
            m = _LINE.match(line)
            if m and m.group(1) == key:
                if _unquote(m.group(2)) == value:
                    return False
                self.lines[i] = f"{key}={value}"
                return True
        self.lines.append(f"{key}={value}")
        return True

    def write(self) -> None:
        """Atomically, mode 0600 from the first byte: the file holds secrets."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, ("\n".join(self.lines) + "\n").encode())
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        os.chmod(self.path, 0o600)


@dataclass(frozen=True)
class Change:
    file: Path
    key: str
    action: str  # generated | rotated | copied | kept | set


class MachineTokens:
    """The environment files under `root` (default `/`): `etc/flux7/flux7.env` and `etc/flux7/sup7.env`."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.dir = root / "etc" / "flux7"
        self.server = self.dir / "flux7.env"
        self.supervisor = self.dir / "sup7.env"

    def enable(self, *, scopes: str = "") -> list[Change]:
        """Generate the secrets the server's file lacks, copy them to sup7's, set the scopes file if given."""
        return self._apply(rotate=(), scopes=scopes)

    def rotate(self, keys: Iterable[str] = SECRETS) -> list[Change]:
        """New values for `keys` in both files (restart both units afterwards)."""
        wanted = tuple(keys)
        unknown = [k for k in wanted if k not in SECRETS]
        if unknown:
            raise ValueError(f"not a machine secret: {', '.join(unknown)} (one of {', '.join(SECRETS)})")
        return self._apply(rotate=wanted, scopes="")

    def show(self) -> dict[str, dict[str, str]]:
        """Per file, each secret's state: its first characters, or `missing`; never the whole value."""
        out: dict[str, dict[str, str]] = {}
        for path in (self.server, self.supervisor):
            env = EnvFile(path)
            state = {
                k: (f"{v[:6]}… ({len(v)} characters)" if not _PLACEHOLDER.match(v) else "missing")
                for k in SECRETS
                for v in [env.get(k)]
            }
            if env.get(SCOPES):
                state[SCOPES] = env.get(SCOPES)
            mode = f"{path.stat().st_mode & 0o777:o}" if path.exists() else "absent"
            out[str(path)] = {"mode": mode, **state}
        return out

    def _apply(self, *, rotate: tuple[str, ...], scopes: str) -> list[Change]:
        server, supervisor = EnvFile(self.server), EnvFile(self.supervisor)
        changes: list[Change] = []
        for key in SECRETS:
            current = server.get(key)
            if key in rotate or _PLACEHOLDER.match(current):
                value = secrets.token_hex(32)
                server.set(key, value)
                changes.append(Change(self.server, key, "rotated" if key in rotate else "generated"))
            else:
                value = current
                changes.append(Change(self.server, key, "kept"))
            if supervisor.set(key, value):
                changes.append(Change(self.supervisor, key, "copied"))
        if scopes:
            for env, path in ((server, self.server), (supervisor, self.supervisor)):
                if env.set(SCOPES, scopes):
                    changes.append(Change(path, SCOPES, "set"))
        server.write()
        supervisor.write()
        return changes
