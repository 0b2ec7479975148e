"""Custom tools: Python files in `~/.config/flux7/tools/` (the user's) and `.flux7/tools/` (the project's, only
when the user's own config says `tools.trust_project = true`: importing a file runs its code, and a repository
you just cloned should not run code by being opened).

A tool file defines:

    NAME = "word_count"                 # optional: the file's name without .py
    DESCRIPTION = "Count the words of a file."
    PARAMETERS = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    MUTATING = False                    # optional, default True: a tool that may change things asks in on-request

    def run(arguments: dict, cwd: pathlib.Path) -> str:   # or async def
        ...

A custom tool is offered beside the built-ins and passes the same gates: its arguments checked against
PARAMETERS, `before_tool` hooks, the local safety layer (as a mutating or reading tool; `path` and `cwd`
arguments checked like the built-ins'), then the mesh's `/decide` under its NAME, and its outcome reported.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from flux7.shared.agent.builtin_tools import BUILTINS, Builtin, ToolContext, ToolRun
from flux7.shared.agent.config import ConfigError

__all__ = ["load_custom_tools"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_MAX_RESULT = 30_000


def _runner(fn: Callable[..., Any]) -> Callable[[dict[str, Any], Path, ToolContext], Any]:
    async def run(arguments: dict[str, Any], cwd: Path, _: ToolContext) -> ToolRun:
        try:
            if inspect.iscoroutinefunction(fn):
                result = await fn(arguments, cwd)
            else:
                result = await asyncio.to_thread(fn, arguments, cwd)
        except Exception as e:  # the tool's failure is its result, never the agent's
            return ToolRun(f"error: {e.__class__.__name__}: {e}", is_error=True)
        text = result if isinstance(result, str) else repr(result)
        if len(text) > _MAX_RESULT:
            text = text[:_MAX_RESULT] + f"\n[... {len(text) - _MAX_RESULT} more characters cut]"
        return ToolRun(text)

    return run


def _load(path: Path) -> Builtin:
    where = f"custom tool {path}"
    spec = importlib.util.spec_from_file_location(f"flux7_agent_tool_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{where}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ConfigError(f"{where}: importing it failed: {e.__class__.__name__}: {e}") from e
    name = getattr(module, "NAME", path.stem)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: NAME must match [A-Za-z][A-Za-z0-9_-]{{0,63}} (got {name!r})")
    description = getattr(module, "DESCRIPTION", "")
    if not isinstance(description, str) or not description:
        raise ConfigError(f"{where}: DESCRIPTION must be a non-empty string")
    parameters = getattr(module, "PARAMETERS", None)
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ConfigError(f"{where}: PARAMETERS must be a JSON Schema of type object")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as e:
        raise ConfigError(f"{where}: PARAMETERS is not a valid JSON Schema: {e.message}") from e
    mutating = getattr(module, "MUTATING", True)
    if not isinstance(mutating, bool):
        raise ConfigError(f"{where}: MUTATING must be true or false")
    fn = getattr(module, "run", None)
    if not callable(fn):
        raise ConfigError(f"{where}: it must define run(arguments, cwd)")
    return Builtin(name, description, parameters, mutating, _runner(fn))


def load_custom_tools(folders: list[Path]) -> list[Builtin]:
    """Every `*.py` in the folders, in order, names unique among themselves and the built-ins."""
    tools: list[Builtin] = []
    seen: dict[str, Path] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            tool = _load(path)
            if tool.name in BUILTINS:
                raise ConfigError(f"custom tool {path}: {tool.name} is a built-in tool's name")
            if tool.name in seen:
                raise ConfigError(f"custom tool {path}: {tool.name} is also defined by {seen[tool.name]}")
            seen[tool.name] = path
            tools.append(tool)
    return tools
