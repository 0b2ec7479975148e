from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.upstreams import CallContext, Registry

from .conftest import FAST, settings
from .servers.http_backend import spec
from .servers.launch import stdio_server_config


def test_an_empty_registry_lists_nothing() -> None:
    reg = Registry(settings(), timings=FAST)
    assert (reg.tools(), reg.servers(), reg.lookup("anything")) == ([], [], None)


@pytest.mark.served
async def test_tools_come_in_a_stable_order_mcp_then_cli_then_openapi(registry_of: Any, tmp_path: Path) -> None:
    spec_file = tmp_path / "pets.json"
    spec_file.write_text(json.dumps(spec("http://127.0.0.1:9")))
    reg: Registry = await registry_of(
        openapi=[{"file": str(spec_file)}],
        cli_tools=[{"name": "say", "bin": "echo", "bare": {}}],
        mcp_servers=[stdio_server_config("echo")],
    )
    sources = [t.source for t in reg.tools()]
    assert sources == sorted(sources, key=["mcp", "cli", "openapi"].index)
    assert reg.tools() == reg.tools()
    assert len(reg.tools()) == 7 + 1 + 8


def test_a_name_offered_twice_goes_to_the_first_source(tmp_path: Path) -> None:
    reg = Registry(
        settings(
            cli_tools=[
                {"name": "say", "bin": "echo", "commands": {"it": {}}, "strict": True},
                {"name": "say", "bin": "printf", "commands": {"it": {}}, "strict": True},
            ]
        ),
        timings=FAST,
    )
    tool = reg.lookup("say.it")
    assert tool is not None and tool.cli_meta is not None and tool.cli_meta["bin"] == "echo"
    assert [t.name for t in reg.tools()] == ["say.it"]


def test_lookup_is_exact_first_then_the_cli_catch_all() -> None:
    reg = Registry(
        settings(cli_tools=[{"name": "git", "bin": "git", "commands": {"status": {}}}]),
        timings=FAST,
    )
    exact = reg.lookup("git.status")
    assert exact is not None and exact.name == "git.status"
    nested = reg.lookup("git.remote.add")
    assert nested is not None and (nested.name, nested.upstream_name) == ("git.__dispatch", "remote.add")
    assert reg.lookup("git.") is None
    assert reg.lookup("git") is None
    assert reg.lookup("svn.status") is None
    assert reg.lookup("git.push") is reg.lookup("git.push")  # derived once, then cached


async def test_arguments_that_are_not_an_object_are_refused(ctx: CallContext) -> None:
    reg = Registry(settings(cli_tools=[{"name": "say", "bin": "echo", "bare": {}}]), timings=FAST)
    tool = reg.lookup("say.run")
    assert tool is not None
    res = await reg.call(tool, ["not", "an", "object"], ctx)  # type: ignore[arg-type]
    assert (res.status_code, res.error) == (400, "arguments must be a JSON object")


async def test_a_failing_listener_does_not_stop_the_others(tmp_path: Path) -> None:
    reg = Registry(settings(), timings=FAST)
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    reg.add_listener(broken)
    reg.add_listener(lambda: calls.append("ok"))
    await reg.start()
    await reg.stop()
    assert calls == ["ok"]
