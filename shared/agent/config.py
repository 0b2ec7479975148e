"""The agent's configuration: layered, validated once at start, with where each value came from.

Layers, later overriding earlier: built-in defaults, the user's `~/.config/flux7/agent.toml` (`$XDG_CONFIG_HOME`
when set), the project's `.flux7/agent.toml` (found from the working directory up to the repository root), the
environment, then the command line. The project's layer is applied whole only in a folder its user trusts
(shared/agent/trust.py); elsewhere what could run code, send data away, read outside the folder or loosen the
safety mode is left out and listed in `AgentConfig.ignored`. Every problem is a `ConfigError` whose message is
one line naming the file (or variable, or flag) and the key. Project memory files (`AGENT.md`, else `AGENTS.md`,
else `CLAUDE.md`: the user's, then each folder from the repository root down to the working directory) become
part of the system prompt. Permission rules (`[permissions] allow`, `deny`) add up across the user's file and a
trusted project's, each remembering its file.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flux7.shared.agent.llm import DEFAULT_URLS
from flux7.shared.agent.permissions import parse_rule
from flux7.shared.agent.safety import MODES
from flux7.shared.agent.trust import trusted_folders, untrusted_reason
from flux7.shared.agent.web import parse_allow

__all__ = [
    "FLAGS",
    "KEY_ENV",
    "MEMORY_FILES",
    "AgentConfig",
    "ConfigError",
    "HookConfig",
    "McpServerConfig",
    "agent_md_files",
    "load_config",
    "user_config_file",
    "workspace_root",
]

_HOOK_EVENTS = ("session_start", "user_prompt", "before_tool", "after_tool", "agent_end", "error")
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
MEMORY_FILES = ("AGENT.md", "AGENTS.md", "CLAUDE.md")  # one per folder, the first found
# The command-line flag of each key that has one (what /config and errors name).
FLAGS = {
    "provider": "--provider",
    "model": "--model",
    "llm_url": "--llm-url",
    "llm_timeout": "--llm-timeout",
    "temperature": "--temperature",
    "max_turns": "--max-turns",
    "approval_mode": "--mode",
    "system_prompt_file": "--system",
    "mesh.url": "--mesh",
    "mesh.agent_id": "--agent-id",
    "mesh.offline": "--offline",
}


class ConfigError(Exception):
    """A configuration problem, said in one line."""


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    url: str = ""
    env: tuple[tuple[str, str], ...] = ()  # the stdio server's environment (the SDK passes only a safe default set)


@dataclass(frozen=True)
class HookConfig:
    event: str
    command: str = ""
    script: str = ""
    timeout: float = 10.0


@dataclass(frozen=True)
class AgentConfig:
    provider: str
    model: str
    llm_url: str
    api_key: str
    temperature: float | None
    max_turns: int
    approval_mode: str
    mesh_url: str
    agent_id: str
    token: str
    offline: bool
    shell_timeout: float
    shell_output_limit: int
    sessions_dir: Path
    system_prompt_file: str
    context_window: int = 128_000
    compact_at: float = 0.8
    llm_timeout: float = 120.0
    permission_rules: tuple[tuple[str, str, str], ...] = ()  # (allow | deny, rule, the file it is in)
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> USD per million in, out
    values: dict[str, Any] = field(default_factory=dict)  # key -> the value in force (for /config)
    tool_folders: tuple[Path, ...] = ()  # where custom tools are loaded from, in order
    mcp_servers: tuple[McpServerConfig, ...] = ()
    hooks: tuple[HookConfig, ...] = ()
    origins: dict[str, str] = field(default_factory=dict)  # key -> "default" | a file | "env NAME" | "flag --x"
    files: tuple[Path, ...] = ()  # the TOML files read, in order
    # Workspace trust (shared/agent/trust.py): the folder trust is keyed by, whether it is trusted, and what of
    # the project's settings an untrusted folder left out (each "key (why)").
    workspace: Path = Path(".")
    trusted: bool = False
    trust_remembered: bool = False  # the user's config names the workspace as trusted
    ignored: tuple[str, ...] = ()
    project_file: Path | None = None
    user_file: Path = Path(".")
    # The shell's sandbox (shared/agent/sandbox.py) and web_fetch's outbound allow-list.
    sandbox_bwrap: str = ""
    sandbox_network: bool = False
    sandbox_hide: tuple[Path, ...] = ()
    sandbox_writable: tuple[Path, ...] = ()
    sandbox_pass_env: tuple[str, ...] = ()
    web_allow: tuple[str, ...] = ()


# key -> (type check, default). Dotted keys are TOML tables: `mesh.url` is `[mesh] url = ...`.
_SCALARS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "provider": (str, ""),
    "model": (str, ""),
    "llm_url": (str, ""),
    "llm_timeout": ((int, float), 120.0),
    "api_key_env": (str, ""),
    "temperature": ((int, float), None),
    "max_turns": (int, 20),
    "approval_mode": (str, "on-request"),
    "system_prompt_file": (str, ""),
    "mesh.url": (str, "http://127.0.0.1:9090"),
    "mesh.agent_id": (str, "flux7-agent"),
    "mesh.offline": (bool, False),
    "shell.timeout": ((int, float), 120.0),
    "shell.output_limit": (int, 30_000),
    "sessions.dir": (str, ""),
    "context.window": (int, 128_000),
    "context.compact_at": ((int, float), 0.8),
    "tools.trust_project": (bool, True),
    "sandbox.bwrap": (str, ""),
    "sandbox.network": (bool, False),
    "sandbox.hide": (list, ()),
    "sandbox.writable": (list, ()),
    "sandbox.pass_env": (list, ()),
    "web_fetch.allow": (list, ()),
    "permissions.allow": (list, ()),
    "permissions.deny": (list, ()),
}
_LISTS = ("mcp_servers", "hooks")
_RULES = ("permissions.allow", "permissions.deny")  # add up across files instead of overriding
_USER_ONLY = ("tools.trust_project", "projects")  # a project cannot trust itself

_ENV = {
    "FLUX7_LLM_PROVIDER": "provider",
    "FLUX7_LLM_MODEL": "model",
    "FLUX7_LLM_URL": "llm_url",
    "FLUX7_LLM_TIMEOUT": "llm_timeout",
    "FLUX7_AGENT_ID": "mesh.agent_id",
    "FLUX7_AGENT_MODE": "approval_mode",
    "MESH_URL": "mesh.url",
}


def user_config_dir(env: Mapping[str, str], home: Path) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(base) / "flux7"


def user_config_file(env: Mapping[str, str], home: Path) -> Path:
    return user_config_dir(env, home) / "agent.toml"


def repo_root(cwd: Path) -> Path | None:
    """The nearest folder at or above cwd holding `.git`; None outside a repository."""
    for folder in [cwd, *cwd.parents]:
        if (folder / ".git").exists():
            return folder
    return None


def project_dir(cwd: Path) -> Path | None:
    """The nearest `.flux7` folder at or above cwd, up to the repository root."""
    root = repo_root(cwd)
    for folder in [cwd, *cwd.parents]:
        if (folder / ".flux7").is_dir():
            return folder / ".flux7"
        if folder == root:
            break
    return None


def project_config(cwd: Path) -> Path | None:
    """`.flux7/agent.toml` in the project's `.flux7` folder."""
    folder = project_dir(cwd)
    return folder / "agent.toml" if folder is not None and (folder / "agent.toml").is_file() else None


def workspace_root(cwd: Path) -> Path:
    """The folder workspace trust is keyed by: the one holding the project's `.flux7/`, else the repository
    root, else the working directory (resolved)."""
    project = project_dir(cwd)
    return (project.parent if project is not None else repo_root(cwd) or cwd).resolve()


def agent_md_files(cwd: Path, env: Mapping[str, str], home: Path) -> list[Path]:
    """The project memory files that apply here, most general first: the user's, then one per folder from the
    repository root down to cwd. In each folder the first of AGENT.md, AGENTS.md (Codex's), CLAUDE.md (Claude
    Code's) is read; the same file twice (a symlink) is read once."""
    root = repo_root(cwd)
    folders = [user_config_dir(env, home)]
    if root is not None:
        folders += [*reversed([f for f in [cwd, *cwd.parents] if f.is_relative_to(root)])]
    else:
        folders.append(cwd)
    found: list[Path] = []
    for folder in folders:
        candidate = next((folder / n for n in MEMORY_FILES if (folder / n).is_file()), None)
        if candidate is not None and candidate.resolve() not in [f.resolve() for f in found]:
            found.append(candidate)
    return found


def _flatten(table: Mapping[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if dotted in _LISTS or dotted in ("projects", "prices"):
            flat[dotted] = value
        elif isinstance(value, dict) and f"{dotted}." in {k[: len(dotted) + 1] for k in _SCALARS}:
            flat.update(_flatten(value, where, f"{dotted}."))
        elif dotted in _SCALARS:
            flat[dotted] = value
        else:
            raise ConfigError(f"{where}: unknown key {dotted!r}")
    return flat


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return _flatten(tomllib.load(f), str(path))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from e


def _check_type(key: str, value: Any, where: str) -> None:
    kind = _SCALARS[key][0]
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: {key} must be an array of non-empty strings (got {value!r})")
        return
    if isinstance(value, bool) and kind is not bool:
        raise ConfigError(f"{where}: {key} must be {_kind_name(kind)}, not a boolean")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: {key} must be {_kind_name(kind)} (got {value!r})")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    if isinstance(kind, tuple):
        return "a number"
    return names.get(kind, kind.__name__)


def _mcp_servers(value: Any, where: str) -> tuple[McpServerConfig, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: mcp_servers must be an array of tables ([[mcp_servers]])")
    servers: list[McpServerConfig] = []
    for i, item in enumerate(value):
        at = f"{where}: mcp_servers[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at} must be a table")
        unknown = set(item) - {"name", "command", "args", "url", "env"}
        if unknown:
            raise ConfigError(f"{at}: unknown key {sorted(unknown)[0]!r}")
        name, command, url = item.get("name"), item.get("command", ""), item.get("url", "")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{at} needs a name")
        if not isinstance(command, str) or not isinstance(url, str) or bool(command) == bool(url):
            raise ConfigError(f"{at} ({name}) needs exactly one of command or url")
        args = item.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{at} ({name}): args must be an array of strings")
        env = item.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ConfigError(f"{at} ({name}): env must be a table of strings")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", name):
            raise ConfigError(f"{at}: name must be 1 to 32 of A-Z a-z 0-9 _ - (got {name!r})")
        servers.append(McpServerConfig(name, command, tuple(args), url, tuple(sorted(env.items()))))
    return tuple(servers)


def _prices(value: Any, where: str) -> dict[str, tuple[float, float]]:
    """`[prices."<model>"] input = 3.0, output = 15.0`: US dollars per million tokens."""
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: prices must be tables like [prices."claude-sonnet-4-5"]')
    found: dict[str, tuple[float, float]] = {}
    for model, entry in value.items():
        at = f"{where}: prices.{json.dumps(model)}"
        if not isinstance(entry, dict) or set(entry) - {"input", "output"}:
            raise ConfigError(f"{at} takes input and output (US dollars per million tokens)")
        numbers = [entry.get("input", 0), entry.get("output", 0)]
        if any(isinstance(n, bool) or not isinstance(n, int | float) or n < 0 for n in numbers):
            raise ConfigError(f"{at}: input and output must be non-negative numbers")
        found[model] = (float(numbers[0]), float(numbers[1]))
    return found


def _hooks(value: Any, where: str) -> tuple[HookConfig, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: hooks must be an array of tables ([[hooks]])")
    hooks: list[HookConfig] = []
    for i, item in enumerate(value):
        at = f"{where}: hooks[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at} must be a table")
        unknown = set(item) - {"event", "command", "script", "timeout"}
        if unknown:
            raise ConfigError(f"{at}: unknown key {sorted(unknown)[0]!r}")
        event = item.get("event")
        if event not in _HOOK_EVENTS:
            raise ConfigError(f"{at}: event must be one of {', '.join(_HOOK_EVENTS)} (got {event!r})")
        command, script = item.get("command", ""), item.get("script", "")
        if not isinstance(command, str) or not isinstance(script, str) or not (command or script):
            raise ConfigError(f"{at} ({event}) needs a command or a script")
        timeout = item.get("timeout", 10.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"{at} ({event}): timeout must be a positive number of seconds")
        hooks.append(HookConfig(event, command, script, float(timeout)))
    return tuple(hooks)


def load_config(
    flags: Mapping[str, Any], env: Mapping[str, str], *, cwd: Path, home: Path, trust: bool = False
) -> AgentConfig:
    """Every layer merged and validated. `flags` holds the command line's values (None: not given), keyed like
    the TOML keys (`mesh.url`); `token` and `session` are flag/env only. `trust` trusts the folder whatever the
    user's config says (`--trust`, or a yes at the prompt); otherwise the user's `[projects]` decide."""
    values: dict[str, Any] = {k: default for k, (_, default) in _SCALARS.items()}
    origins = dict.fromkeys(values, "default")
    lists: dict[str, tuple[Any, str]] = {}
    files: list[Path] = []
    user_file = user_config_file(env, home)
    project_file = project_config(cwd)
    workspace = workspace_root(cwd)
    user_table = _read_toml(user_file) if user_file.is_file() else {}
    project_table = _read_toml(project_file) if project_file is not None else {}
    try:
        trusted_here = trusted_folders(user_table.get("projects", {}), str(user_file))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    trusted = trust or str(workspace) in trusted_here
    ignored: list[str] = []
    rules: list[tuple[str, str, str]] = []
    prices: dict[str, tuple[float, float]] = {}
    for path, table in [(user_file, user_table), (project_file, project_table)]:
        if path is None or (path == user_file and not user_file.is_file()):
            continue
        files.append(path)
        from_project = path != user_file
        for key, value in table.items():
            if from_project and key in _USER_ONLY:
                raise ConfigError(f"{path}: {key} can only be set in the user's own {user_file}")
            if key == "projects":
                continue
            if key in _LISTS:
                (_mcp_servers if key == "mcp_servers" else _hooks)(value, str(path))  # validated either way
            elif key == "prices":
                prices.update(_prices(value, str(path)))
                continue
            else:
                _check_type(key, value, str(path))
            if key in _RULES:
                for text in value:
                    try:
                        parse_rule(text, key.split(".")[1], str(path))
                    except ValueError as e:
                        raise ConfigError(f"{path}: {key}: {e}") from None
            why = untrusted_reason(key, value, values, cwd, workspace) if from_project and not trusted else ""
            if why:
                ignored.append(f"{key} ({why})")
                continue
            if key in _LISTS:
                lists[key] = (value, str(path))
                continue
            if key in _RULES:
                rules += [(key.split(".")[1], text, str(path)) for text in value]
                origins[key] = str(path) if origins[key] == "default" else f"{origins[key]}, {path}"
                values[key] = [*values[key], *value]
                continue
            values[key], origins[key] = value, str(path)
    for name, key in _ENV.items():
        if env.get(name):
            values[key], origins[key] = env[name], f"env {name}"
            if key == "llm_timeout":
                try:
                    values[key] = float(env[name])
                except ValueError:
                    raise ConfigError(f"env {name}: must be a number of seconds (got {env[name]!r})") from None
    for key, value in flags.items():
        if value is not None and key in _SCALARS:
            flag = FLAGS.get(key, f"--{key.split('.')[-1].replace('_', '-')}")
            _check_type(key, value, flag)
            values[key], origins[key] = value, f"flag {flag}"

    def at(key: str) -> str:
        return origins[key]

    provider = values["provider"]
    if not provider:  # the provider whose key is set; a local Ollama only when its URL was given
        found = next((p for p, var in KEY_ENV.items() if env.get(var)), "")
        if not found and not values["llm_url"]:
            raise ConfigError(
                "no model provider: pass --provider (anthropic, openai, ollama) or set ANTHROPIC_API_KEY "
                "or OPENAI_API_KEY; for a local Ollama, --provider ollama (or FLUX7_LLM_URL=http://localhost:11434)"
            )
        provider = found or "ollama"
        origins["provider"] = "default"
    if provider not in DEFAULT_URLS:
        raise ConfigError(f"{at('provider')}: unknown provider {provider!r} (known: {', '.join(sorted(DEFAULT_URLS))})")
    if not values["model"]:
        raise ConfigError('no model: pass --model, set FLUX7_LLM_MODEL, or put model = "..." in agent.toml')
    key_env = values["api_key_env"] or KEY_ENV.get(provider, "")
    api_key = env.get("FLUX7_LLM_API_KEY") or (env.get(key_env, "") if key_env else "")
    if provider in KEY_ENV and not api_key and not values["llm_url"]:
        raise ConfigError(f"no API key for {provider}: set {key_env} (or FLUX7_LLM_API_KEY)")
    temperature = values["temperature"]
    if temperature is not None and not 0 <= float(temperature) <= 2:
        raise ConfigError(f"{at('temperature')}: temperature must be between 0 and 2 (got {temperature})")
    if values["approval_mode"] not in MODES:
        raise ConfigError(
            f"{at('approval_mode')}: approval_mode must be one of {', '.join(MODES)} (got {values['approval_mode']!r})"
        )
    if values["llm_timeout"] <= 0:
        raise ConfigError(f"{at('llm_timeout')}: llm_timeout must be a positive number of seconds")
    if values["max_turns"] < 1:
        raise ConfigError(f"{at('max_turns')}: max_turns must be at least 1")
    if values["shell.timeout"] <= 0:
        raise ConfigError(f"{at('shell.timeout')}: shell.timeout must be a positive number of seconds")
    if values["shell.output_limit"] < 1000:
        raise ConfigError(f"{at('shell.output_limit')}: shell.output_limit must be at least 1000 characters")
    if values["context.window"] < 1000:
        raise ConfigError(f"{at('context.window')}: context.window must be at least 1000 tokens")
    if not 0.1 <= float(values["context.compact_at"]) <= 0.95:
        raise ConfigError(f"{at('context.compact_at')}: context.compact_at must be between 0.1 and 0.95")
    if not str(values["mesh.url"]).startswith(("http://", "https://")):
        raise ConfigError(f"{at('mesh.url')}: mesh.url must be an http(s) URL (got {values['mesh.url']!r})")
    mcp = _mcp_servers(*lists["mcp_servers"]) if "mcp_servers" in lists else ()
    hooks = _hooks(*lists["hooks"]) if "hooks" in lists else ()
    sessions_dir = values["sessions.dir"] or ""
    if sessions_dir:
        sessions = Path(sessions_dir).expanduser()
    else:
        data = env.get("XDG_DATA_HOME") or str(home / ".local" / "share")
        sessions = Path(data) / "flux7" / "agent" / "sessions"
    token = str(flags.get("token") or env.get("MESH_AGENT_TOKEN") or "")
    folders = [user_config_dir(env, home) / "tools"]
    project = project_dir(cwd)
    if project is not None and (project / "tools").is_dir():
        if not trusted:
            if any((project / "tools").glob("*.py")):
                ignored.append(f"{project / 'tools'} (custom tools: importing them runs their code)")
        elif values["tools.trust_project"]:
            folders.append(project / "tools")
    web_allow = tuple(values["web_fetch.allow"])
    for entry in web_allow:
        try:
            parse_allow(entry)
        except ValueError:
            raise ConfigError(
                f"{at('web_fetch.allow')}: web_fetch.allow entries are host, host:port or an address range "
                f"(10.0.0.0/8), not {entry!r}"
            ) from None
    paths: dict[str, tuple[Path, ...]] = {}
    for key in ("sandbox.hide", "sandbox.writable"):
        for entry in values[key]:
            if not entry.startswith(("/", "~")):
                raise ConfigError(f"{at(key)}: {key} entries must be absolute paths or start with ~ (got {entry!r})")
        paths[key] = tuple(
            (home / e[2:] if e == "~" or e.startswith("~/") else Path(e).expanduser()) for e in values[key]
        )
    return AgentConfig(
        provider=provider,
        model=values["model"],
        llm_url=values["llm_url"],
        api_key=api_key,
        temperature=float(temperature) if temperature is not None else None,
        max_turns=int(values["max_turns"]),
        approval_mode=values["approval_mode"],
        mesh_url=values["mesh.url"],
        agent_id=values["mesh.agent_id"],
        token=token,
        offline=bool(values["mesh.offline"]),
        shell_timeout=float(values["shell.timeout"]),
        shell_output_limit=int(values["shell.output_limit"]),
        sessions_dir=sessions,
        system_prompt_file=values["system_prompt_file"],
        context_window=int(values["context.window"]),
        compact_at=float(values["context.compact_at"]),
        llm_timeout=float(values["llm_timeout"]),
        permission_rules=tuple(rules),
        prices=prices,
        values={**values, "provider": provider},
        tool_folders=tuple(folders),
        mcp_servers=mcp,
        hooks=hooks,
        origins=origins,
        files=tuple(files),
        workspace=workspace,
        trusted=trusted,
        trust_remembered=str(workspace) in trusted_here,
        ignored=tuple(ignored),
        project_file=project_file,
        user_file=user_file,
        sandbox_bwrap=values["sandbox.bwrap"],
        sandbox_network=bool(values["sandbox.network"]),
        sandbox_hide=paths["sandbox.hide"],
        sandbox_writable=paths["sandbox.writable"],
        sandbox_pass_env=tuple(values["sandbox.pass_env"]),
        web_allow=web_allow,
    )
