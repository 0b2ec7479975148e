"""CLI binaries as tools: `<cli>.<sub>` per declared command, `<cli>.__dispatch` when not strict, `<cli>.run`
for a bare binary. Never a shell: argv goes straight to exec, and each argument is checked first.

Arguments of every CLI tool: `{"args": [..], "flags": {..}}`; the dispatcher adds `"command"`
(docs/upstreams.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from flux7.shared.durations import format_duration, parse_duration
from flux7.shared.settings import CliCommand, CliTool, Settings
from flux7.shared.upstreams.base import CallContext, Param, ToolDef, UpstreamResult
from flux7.shared.upstreams.classify import classify

__all__ = ["MAX_OUTPUT_BYTES", "ArgumentRefused", "CliUpstream", "build_argv", "missing_binary", "tool_environment"]

MAX_OUTPUT_BYTES = 1 << 20  # per stream; the rest is read and dropped so the child never blocks
DEFAULT_TIMEOUT = 30.0
# Refused in any argument even though no shell runs: a wrapper script or a later `sh -c` must not get them.
_METACHARS = (";", "&&", "||", "|", "`", "$(", "${", "\n", "\r", "\x00")
_KNOWN_KEYS = frozenset({"args", "flags", "command"})

_ARGS_SCHEMA = {"type": "array", "items": {"type": "string"}, "description": "positional arguments, in order"}
_FLAGS_SCHEMA = {
    "type": "object",
    "description": 'named flags: {"n": 3} gives -n 3, {"all": true} gives --all',
    "additionalProperties": {"type": ["string", "number", "boolean", "array"]},
}

# What every CLI tool answers (the mesh builds it), declared so MCP clients also get it as structuredContent.
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string", "description": "standard output (at most 1 MiB)"},
        "stderr": {"type": "string", "description": "standard error (at most 1 MiB)"},
        "exit_code": {"type": "integer", "description": "the process's exit status"},
    },
    "required": ["stdout", "stderr", "exit_code"],
}


class ArgumentRefused(ValueError):
    """An argument the tool's configuration does not allow; the call never runs."""


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float | str):
        return str(value)
    raise ArgumentRefused(f"argument values must be strings or numbers, got {type(value).__name__}")


def _flag_tokens(flags: Any) -> list[str]:
    if not isinstance(flags, dict):
        raise ArgumentRefused("flags must be an object")
    out: list[str] = []
    for key, value in flags.items():
        flag = ("-" if len(key) == 1 else "--") + key
        for item in value if isinstance(value, list) else [value]:
            if item is True:
                out.append(flag)
            elif item is False or item is None:
                continue
            else:
                out.extend((flag, _text(item)))
    return out


def _check(tokens: list[str], allowed: tuple[str, ...]) -> None:
    for tok in tokens:
        for mc in _METACHARS:
            if mc in tok:
                raise ArgumentRefused(f"dangerous character in argument: {mc!r}")
    if not allowed:
        return
    for tok in tokens:
        if tok.startswith("-") and tok.split("=", 1)[0] not in allowed:
            raise ArgumentRefused(f"flag not allowed: {tok} (allowed: {', '.join(allowed)})")


def build_argv(tool: ToolDef, arguments: dict[str, Any], commands: dict[str, CliCommand]) -> tuple[list[str], float]:
    """(argv after the binary, timeout in seconds) for a call, or ArgumentRefused."""
    meta = tool.cli_meta or {}
    unknown = sorted(k for k in arguments if k not in _KNOWN_KEYS)
    if unknown:
        raise ArgumentRefused(f"unknown argument(s): {', '.join(unknown)} (a CLI tool takes args, flags)")
    raw_args = arguments.get("args", [])
    if raw_args is None:
        raw_args = []
    if not isinstance(raw_args, list):
        raise ArgumentRefused("args must be an array of strings")
    tokens = [_text(a) for a in raw_args] + _flag_tokens(arguments.get("flags") or {})
    allowed = tuple(meta.get("allowed_args") or ())
    timeout = meta.get("timeout", 0) / 1e9 or DEFAULT_TIMEOUT
    command: str = meta.get("command", "")
    if meta.get("is_catch_all"):
        given = arguments.get("command")
        if given is not None and not isinstance(given, str):
            raise ArgumentRefused("command must be a string")
        if tool.upstream_name and given not in (None, tool.upstream_name):
            # Policy decided on the name the agent called; running another subcommand would bypass it.
            raise ArgumentRefused(f"command {given!r} does not match the tool name {tool.name!r}")
        command = tool.upstream_name or given or ""
        if not command:
            raise ArgumentRefused("command is required: the subcommand to run")
        if command.startswith("-"):
            raise ArgumentRefused(f"command must be a subcommand, not a flag: {command}")
        declared = commands.get(command)
        if declared is not None:  # a declared command keeps its own limits when reached through dispatch
            allowed, timeout = declared.allowed_args, parse_duration(declared.timeout) or DEFAULT_TIMEOUT
    elif "command" in arguments:
        raise ArgumentRefused("unknown argument(s): command (only the dispatcher takes one)")
    _check([command, *tokens] if command else tokens, allowed)
    return ([command, *tokens] if command else tokens), timeout


async def _read_capped(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < MAX_OUTPUT_BYTES:
            kept += chunk[: MAX_OUTPUT_BYTES - len(kept)]
    return bytes(kept)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def tool_environment(cfg: CliTool) -> dict[str, str]:
    """The binary's whole environment: the mesh's own secrets never reach it."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "en_US.UTF-8",
        **cfg.env,
    }


def missing_binary(cfg: CliTool, settings: Settings) -> str:
    """Why `cfg.bin` cannot be executed as the tool would run it ("" when it can): looked up on the tool's PATH,
    or, with a slash, relative to its working directory."""
    cwd = settings.resolve_path(cfg.working_dir) if cfg.working_dir else Path.cwd()
    if "/" in cfg.bin:
        path = cwd / Path(cfg.bin).expanduser()
        if not path.is_file():
            return f"{cfg.bin} does not exist"
        return "" if os.access(path, os.X_OK) else f"{cfg.bin} is not executable"
    if shutil.which(cfg.bin, path=tool_environment(cfg)["PATH"]) is None:
        return f"{cfg.bin} is not on the PATH"
    return ""


class CliUpstream:
    """One `cli_tools:` entry."""

    def __init__(self, cfg: CliTool, settings: Settings) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self._cwd = str(settings.resolve_path(cfg.working_dir)) if cfg.working_dir else None
        self._env = tool_environment(cfg)
        self._tools = self._build()

    def _meta(self, command: str, cmd: CliCommand | None, catch_all: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"bin": self.cfg.bin, "command": command}
        if cmd is not None and cmd.allowed_args:
            meta["allowed_args"] = list(cmd.allowed_args)
        # Go's time.Duration marshals as integer nanoseconds.
        meta["timeout"] = round((parse_duration(cmd.timeout) if cmd else DEFAULT_TIMEOUT) * 1e9)
        if self.cfg.working_dir:
            meta["working_dir"] = self.cfg.working_dir
        meta["strict"] = self.cfg.strict
        meta["default_action"] = self.cfg.default_action or "deny"
        meta["is_catch_all"] = catch_all
        return meta

    def _tool(self, name: str, description: str, meta: dict[str, Any], own_name: str) -> ToolDef:
        params = [
            Param(name="args", in_="body", type="array"),
            Param(name="flags", in_="body", type="object"),
        ]
        props: dict[str, Any] = {"args": dict(_ARGS_SCHEMA), "flags": dict(_FLAGS_SCHEMA)}
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if meta["is_catch_all"]:
            params.insert(0, Param(name="command", in_="body", type="string", required=True))
            props = {"command": {"type": "string", "description": "the subcommand to run"}, **props}
            schema = {"type": "object", "properties": props, "required": ["command"]}
        return ToolDef(
            name=name,
            description=description,
            params=params,
            source="cli",
            cli_meta=meta,
            classification=classify(own_name=own_name, dispatcher=meta["is_catch_all"]),
            input_schema=schema,
            output_schema=OUTPUT_SCHEMA,
        )

    def _build(self) -> list[ToolDef]:
        cfg = self.cfg
        if cfg.bare is not None:
            # Classified on the binary's name: "run" is the mesh's word, not the upstream's.
            return [self._tool(f"{cfg.name}.run", f"Run {cfg.bin}", self._meta("", cfg.bare, False), cfg.name)]
        tools = [
            self._tool(f"{cfg.name}.{sub}", f"Run {cfg.bin} {sub}", self._meta(sub, cmd, False), sub)
            for sub, cmd in cfg.commands.items()
        ]
        if not cfg.strict:
            desc = f"Run {cfg.bin} <command> (any subcommand)"
            tools.append(self._tool(f"{cfg.name}.__dispatch", desc, self._meta("", None, True), ""))
        return tools

    def tools(self) -> list[ToolDef]:
        return self._tools

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def call(self, tool: ToolDef, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult:
        try:
            argv, timeout = build_argv(tool, arguments, self.cfg.commands)
        except ArgumentRefused as e:
            return UpstreamResult(status_code=400, error=f"argument validation failed: {e}")
        try:
            proc = await asyncio.create_subprocess_exec(
                self.cfg.bin,
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,  # its own process group: a timeout kills the children too
            )
        except OSError as e:
            return UpstreamResult(status_code=500, error=f"exec error: {e.strerror or e}: {self.cfg.bin}")
        try:
            out, err, code = await asyncio.wait_for(self._collect(proc), timeout)
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            return UpstreamResult(
                result={"stdout": "", "stderr": "", "exit_code": -1},
                status_code=504,
                error=f"command timed out after {format_duration(timeout)}",
                exit_code=-1,
                timed_out=True,
            )
        finally:
            if proc.returncode is None:  # cancelled by the caller
                _kill_group(proc)
        result = {"stdout": out, "stderr": err, "exit_code": code}
        if code != 0:
            return UpstreamResult(result=result, status_code=422, error=f"exit status {code}", exit_code=code)
        return UpstreamResult(result=result, status_code=200, exit_code=0)

    @staticmethod
    async def _collect(proc: asyncio.subprocess.Process) -> tuple[str, str, int]:
        out, err = await asyncio.gather(_read_capped(proc.stdout), _read_capped(proc.stderr))
        code = await proc.wait()
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code
