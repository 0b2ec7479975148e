from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.upstreams import CallContext, Registry, ToolDef


def _tool(reg: Registry, name: str) -> ToolDef:
    tool = reg.lookup(name)
    assert tool is not None, name
    return tool


@pytest.fixture
async def clis(registry_of: Any, tmp_path: Path) -> Registry:
    (tmp_path / "inside.txt").write_text("x")
    reg: Registry = await registry_of(
        cli_tools=[
            {
                "name": "echo",
                "bin": "echo",
                "default_action": "allow",
                "commands": {"hello": {}, "strict-ish": {"allowed_args": ["-n"], "timeout": "5s"}},
            },
            {"name": "lister", "bin": "ls", "strict": True, "commands": {"tree": {}}},
            {"name": "ls", "bin": "ls", "working_dir": str(tmp_path), "bare": {"allowed_args": ["-1", "-a"]}},
            {"name": "nap", "bin": "sleep", "bare": {"timeout": "200ms"}},
            {"name": "no", "bin": "false", "bare": {}},
            {"name": "env", "bin": "env", "env": {"FOO": "bar"}, "bare": {}},
            {"name": "ghost", "bin": "/nonexistent/flux7-binary", "bare": {}},
        ]
    )
    return reg


def test_commands_dispatcher_and_bare_binaries_are_named_per_contract(clis: Registry) -> None:
    names = [t.name for t in clis.tools()]
    assert names == [
        "echo.hello",
        "echo.strict-ish",
        "echo.__dispatch",
        "lister.tree",
        "ls.run",
        "nap.run",
        "no.run",
        "env.run",
        "ghost.run",
    ]
    meta = _tool(clis, "echo.strict-ish").cli_meta
    assert meta == {
        "bin": "echo",
        "command": "strict-ish",
        "allowed_args": ["-n"],
        "timeout": 5_000_000_000,
        "strict": False,
        "default_action": "allow",
        "is_catch_all": False,
    }
    dispatch = _tool(clis, "echo.__dispatch")
    assert dispatch.cli_meta is not None and dispatch.cli_meta["is_catch_all"] is True
    assert dispatch.input_schema["required"] == ["command"]
    assert _tool(clis, "nap.run").cli_meta["default_action"] == "deny"  # type: ignore[index]


def test_classification_tells_named_commands_from_the_generic_dispatcher(clis: Registry) -> None:
    dispatch = _tool(clis, "echo.__dispatch").classification
    assert (dispatch.family, dispatch.access) == ("generic", "unknown")
    assert "CLI dispatcher: the subcommand is an argument" in dispatch.reasons
    bare_ls = _tool(clis, "ls.run").classification
    assert (bare_ls.family, bare_ls.access) == ("named", "read")


async def test_a_command_returns_stdout_stderr_and_exit_code(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "echo.hello"), {"args": ["world", 42]}, ctx)
    assert (res.status_code, res.error, res.exit_code) == (200, "", 0)
    assert res.result == {"stdout": "hello world 42\n", "stderr": "", "exit_code": 0}


async def test_no_shell_ever_sees_the_arguments(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "echo.hello"), {"args": ["$HOME", "*", "~"]}, ctx)
    assert res.result["stdout"] == "hello $HOME * ~\n"


async def test_flags_become_dash_arguments(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "echo.hello"), {"flags": {"x": 1, "long": "v", "on": True, "off": False}}, ctx)
    assert res.result["stdout"] == "hello -x 1 --long v --on\n"


async def test_a_non_zero_exit_is_a_422_with_its_exit_code(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "no.run"), {}, ctx)
    assert (res.status_code, res.exit_code, res.error) == (422, 1, "exit status 1")
    assert res.result == {"stdout": "", "stderr": "", "exit_code": 1}


async def test_a_missing_binary_is_a_500_execution_error(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "ghost.run"), {}, ctx)
    assert res.status_code == 500
    assert res.error.startswith("exec error:") and "/nonexistent/flux7-binary" in res.error


async def test_a_flag_outside_allowed_args_is_refused_before_anything_runs(
    clis: Registry, ctx: CallContext, tmp_path: Path
) -> None:
    ok = await clis.call(_tool(clis, "ls.run"), {"args": ["-1"]}, ctx)
    assert ok.status_code == 200 and ok.result["stdout"] == "inside.txt\n"  # working_dir is honoured
    refused = await clis.call(_tool(clis, "ls.run"), {"args": ["-R", "/"]}, ctx)
    assert (refused.status_code, refused.result, refused.exit_code) == (400, None, None)
    assert refused.error == "argument validation failed: flag not allowed: -R (allowed: -1, -a)"
    via_flags = await clis.call(_tool(clis, "ls.run"), {"flags": {"recursive": True}}, ctx)
    assert "flag not allowed: --recursive" in via_flags.error


@pytest.mark.parametrize("arg", ["a;b", "a && b", "x | y", "`id`", "$(id)", "${HOME}", "two\nlines"])
async def test_shell_metacharacters_are_refused(clis: Registry, ctx: CallContext, arg: str) -> None:
    res = await clis.call(_tool(clis, "echo.hello"), {"args": [arg]}, ctx)
    assert res.status_code == 400
    assert "dangerous character in argument" in res.error


async def test_unknown_argument_keys_and_bad_shapes_are_refused(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "echo.hello"), {"path": "/tmp"}, ctx)
    assert res.error == "argument validation failed: unknown argument(s): path (a CLI tool takes args, flags)"
    res = await clis.call(_tool(clis, "echo.hello"), {"args": "not a list"}, ctx)
    assert res.error == "argument validation failed: args must be an array of strings"
    res = await clis.call(_tool(clis, "echo.hello"), {"args": [{"nested": 1}]}, ctx)
    assert res.status_code == 400


async def test_a_timeout_kills_the_command(clis: Registry, ctx: CallContext) -> None:
    started = time.monotonic()
    res = await clis.call(_tool(clis, "nap.run"), {"args": ["30"]}, ctx)
    assert time.monotonic() - started < 5
    assert (res.status_code, res.exit_code, res.error, res.timed_out) == (
        504,
        -1,
        "command timed out after 200ms",
        True,
    )


async def test_env_is_isolated_and_carries_the_configured_variables(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "env.run"), {}, ctx)
    keys = {line.split("=", 1)[0] for line in res.result["stdout"].splitlines()}
    assert keys == {"PATH", "HOME", "LANG", "FOO"}
    assert "FOO=bar" in res.result["stdout"].splitlines()


async def test_the_catch_all_runs_the_subcommand_named_in_the_tool_name(clis: Registry, ctx: CallContext) -> None:
    tool = _tool(clis, "echo.goodbye")
    assert tool.name == "echo.__dispatch" and tool.upstream_name == "goodbye"
    res = await clis.call(tool, {"args": ["now"]}, ctx)
    assert res.result["stdout"] == "goodbye now\n"
    direct = await clis.call(_tool(clis, "echo.__dispatch"), {"command": "hi", "args": ["there"]}, ctx)
    assert direct.result["stdout"] == "hi there\n"


async def test_the_catch_all_refuses_a_command_other_than_the_called_name(clis: Registry, ctx: CallContext) -> None:
    res = await clis.call(_tool(clis, "echo.status"), {"command": "push"}, ctx)
    assert res.status_code == 400 and "does not match the tool name" in res.error
    res = await clis.call(_tool(clis, "echo.__dispatch"), {}, ctx)
    assert res.error == "argument validation failed: command is required: the subcommand to run"
    res = await clis.call(_tool(clis, "echo.__dispatch"), {"command": "--version"}, ctx)
    assert "not a flag" in res.error


async def test_a_declared_command_keeps_its_allowed_args_through_the_dispatcher(
    clis: Registry, ctx: CallContext
) -> None:
    res = await clis.call(_tool(clis, "echo.__dispatch"), {"command": "strict-ish", "args": ["-e", "x"]}, ctx)
    assert res.status_code == 400 and "flag not allowed: -e" in res.error


def test_strict_tools_have_no_catch_all(clis: Registry) -> None:
    assert clis.lookup("lister.anything") is None
    assert clis.lookup("lister.tree") is not None
    assert clis.lookup("unknown.thing") is None
