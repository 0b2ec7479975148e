"""The upstream MCP client against a real server built on the official SDK, over every transport."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from mcp.client import Client

from flux7.shared.upstreams import CallContext, Registry, ToolDef

from .conftest import FAST, TRACEPARENT
from .servers import mcp_echo
from .servers.launch import McpHttpProcess, eventually, free_port, stdio_server_config, wait_port

pytestmark = pytest.mark.served

MEET = os.path.join(os.path.dirname(__file__), "servers", "mcp_meet.py")

TRANSPORTS = ["stdio", "streamable-http", "sse"]
ECHO_TOOLS = ["echo", "read_file", "write_file", "search", "fail", "broken", "whoami"]


def _servers(reg: Registry) -> list[dict[str, Any]]:
    """GET /mcp-servers as its JSON."""
    servers: list[dict[str, Any]] = msgspec.to_builtins(reg.servers())
    return servers


@pytest.fixture(scope="module")
def http_servers() -> Iterator[dict[str, McpHttpProcess]]:
    with McpHttpProcess("streamable-http") as streamable, McpHttpProcess("sse") as sse:
        yield {"streamable-http": streamable, "sse": sse}


def server_cfg(transport: str, http_servers: dict[str, McpHttpProcess], name: str = "echo", **extra: Any) -> Any:
    if transport == "stdio":
        return stdio_server_config(name, **extra)
    return {"name": name, "transport": transport, "url": http_servers[transport].url, **extra}


def _tool(reg: Registry, name: str) -> ToolDef:
    tool = reg.lookup(name)
    assert tool is not None, name
    return tool


async def _sdk_schemas() -> dict[str, Any]:
    """What the official SDK client sees of the same server: the reference for "verbatim"."""
    async with Client(mcp_echo.build(), mode="legacy") as client:
        listed = await client.list_tools()
    return {t.name: t.model_dump(by_alias=True, exclude_none=True, mode="json")["inputSchema"] for t in listed.tools}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_tools_are_listed_as_server_dot_tool_with_input_schemas_verbatim(
    registry_of: Any, http_servers: dict[str, McpHttpProcess], transport: str
) -> None:
    reg: Registry = await registry_of(mcp_servers=[server_cfg(transport, http_servers)])
    assert [t.name for t in reg.tools()] == [f"echo.{n}" for n in ECHO_TOOLS]
    assert _servers(reg) == [{"name": "echo", "transport": transport, "status": "ok", "tools": ECHO_TOOLS}]
    expected = await _sdk_schemas()
    for tool in reg.tools():
        assert tool.input_schema == expected[tool.upstream_name]
        assert (tool.source, tool.mcp_server) == ("mcp", "echo")
    search = _tool(reg, "echo.search")
    assert [(p.name, p.in_, p.type, p.required) for p in search.params] == [
        ("query", "body", "string", True),
        ("limit", "body", "integer", False),
        ("tags", "body", "string", False),
    ]
    assert search.view().mcp_server == "echo"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_calls_return_the_raw_result_and_a_jsonrpc_error_is_a_502(
    registry_of: Any, http_servers: dict[str, McpHttpProcess], transport: str, ctx: CallContext
) -> None:
    reg: Registry = await registry_of(mcp_servers=[server_cfg(transport, http_servers)])
    res = await reg.call(_tool(reg, "echo.echo"), {"text": "hi"}, ctx)
    assert (res.status_code, res.error) == (200, "")
    assert res.result["content"] == [{"type": "text", "text": "hi"}]
    assert res.result["isError"] is False
    failed = await reg.call(_tool(reg, "echo.fail"), {}, ctx)
    assert (failed.status_code, failed.result) == (502, None)
    assert failed.error == f"MCP error {mcp_echo.FAIL_CODE}: {mcp_echo.FAIL_MESSAGE}"
    broken = await reg.call(_tool(reg, "echo.broken"), {}, ctx)  # a tool failure is a result, not an error
    assert (broken.status_code, broken.error, broken.result["isError"]) == (200, "", True)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_meta_carries_the_traceparent_and_the_agent_only_with_forward_identity(
    registry_of: Any, http_servers: dict[str, McpHttpProcess], transport: str, ctx: CallContext
) -> None:
    reg: Registry = await registry_of(
        mcp_servers=[
            server_cfg(transport, http_servers, "plain"),
            server_cfg(transport, http_servers, "ident", forward_identity=True),
        ]
    )

    async def meta_seen(server: str) -> Any:
        res = await reg.call(_tool(reg, f"{server}.whoami"), {}, ctx)
        meta = json.loads(res.result["content"][0]["text"])
        # A stateless (2026-07-28) request also carries the protocol's own envelope there.
        return {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/")}

    assert await meta_seen("plain") == {"traceparent": TRACEPARENT}
    assert await meta_seen("ident") == {"traceparent": TRACEPARENT, "art.flux7/agent": "alice"}


async def test_annotations_and_names_drive_the_classification(registry_of: Any) -> None:
    reg: Registry = await registry_of(mcp_servers=[stdio_server_config("echo")])
    read, write, echo = (_tool(reg, f"echo.{n}").classification for n in ("read_file", "write_file", "echo"))
    assert read.access == "read" and "annotation readOnlyHint=true" in read.reasons
    assert write.access == "write" and "annotation destructiveHint=true" in write.reasons
    assert (echo.access, echo.reasons) == ("unknown", ["no signal"])


async def test_server_env_reaches_a_stdio_server(registry_of: Any) -> None:
    env = {"MCP_ECHO_DESCRIPTION": "Echo, changed.", "MCP_ECHO_EXTRA_TOOL": "1"}
    reg: Registry = await registry_of(mcp_servers=[stdio_server_config("echo", env=env)])
    assert _tool(reg, "echo.echo").description == "Echo, changed."
    assert reg.lookup("echo.extra") is not None


async def test_a_killed_stdio_server_is_respawned_and_serves_calls_again(registry_of: Any, ctx: CallContext) -> None:
    reg: Registry = await registry_of(mcp_servers=[stdio_server_config("echo")])
    changes: list[int] = []
    reg.add_listener(lambda: changes.append(1))
    upstream = reg.server("echo")
    assert upstream is not None and upstream.pid is not None
    first_pid = upstream.pid
    os.kill(first_pid, signal.SIGKILL)
    await eventually(lambda: upstream.pid not in (None, first_pid) and upstream.status == "ok", what="a new server")
    res = await reg.call(_tool(reg, "echo.echo"), {"text": "again"}, ctx)
    assert res.result["content"][0]["text"] == "again"
    assert changes == []  # the same tools came back: nothing for pinning to re-check


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_restarted_http_server_is_reconnected_and_calls_fail_fast_meanwhile(
    registry_of: Any, transport: str, ctx: CallContext
) -> None:
    server = McpHttpProcess(transport).start()
    try:
        reg: Registry = await registry_of(mcp_servers=[{"name": "echo", "transport": transport, "url": server.url}])
        upstream = reg.server("echo")
        assert upstream is not None and upstream.status == "ok"
        tool = _tool(reg, "echo.echo")
        server.kill()
        if transport == "streamable-http":  # no standing connection: the next request finds out
            lost = await reg.call(tool, {"text": "x"}, ctx)
            assert lost.status_code == 502 and lost.error
        await eventually(lambda: upstream.status == "error", what="the lost connection to show")
        view = _servers(reg)[0]
        assert view["tools"] == ECHO_TOOLS and view["error"]
        meanwhile = await reg.call(tool, {"text": "x"}, ctx)
        assert meanwhile.status_code == 502 and meanwhile.error.startswith("MCP server echo is not connected")
        server.start()
        await eventually(lambda: upstream.status == "ok", what="reconnection")
        res = await reg.call(tool, {"text": "back"}, ctx)
        assert res.result["content"][0]["text"] == "back"
    finally:
        server.kill()


async def test_a_server_down_at_start_is_retrying_until_it_comes_up(registry_of: Any, ctx: CallContext) -> None:
    server = McpHttpProcess("streamable-http", port=free_port())
    reg: Registry = await registry_of(mcp_servers=[{"name": "late", "transport": "streamable-http", "url": server.url}])
    changes: list[int] = []
    reg.add_listener(lambda: changes.append(len(reg.tools())))
    [view] = _servers(reg)
    assert (view["status"], view["tools"]) == ("retrying", [])
    assert view["error"].startswith("connect: ")
    assert reg.lookup("late.echo") is None
    with server:
        await eventually(lambda: _servers(reg)[0]["status"] == "ok", what="the late server")
        assert "error" not in _servers(reg)[0]
        assert changes and changes[-1] == len(ECHO_TOOLS)
        res = await reg.call(_tool(reg, "late.echo"), {"text": "late"}, ctx)
        assert res.status_code == 200


async def test_a_stdio_command_that_cannot_start_is_retrying_with_the_reason(registry_of: Any) -> None:
    reg: Registry = await registry_of(
        mcp_servers=[{"name": "ghost", "transport": "stdio", "command": "/nonexistent/mcp-server"}]
    )
    [view] = _servers(reg)
    assert view["status"] == "retrying"
    assert "/nonexistent/mcp-server" in view["error"]


async def test_start_is_capped_when_a_server_never_answers(registry_of: Any) -> None:
    timings = replace(FAST, start_timeout=0.5)
    started = time.monotonic()
    reg: Registry = await registry_of(
        timings=timings,
        mcp_servers=[{"name": "mute", "transport": "stdio", "command": "sleep", "args": ["60"]}],
    )
    assert time.monotonic() - started < 3
    await eventually(lambda: "timed out" in _servers(reg)[0].get("error", ""), what="the timeout to be reported")
    assert _servers(reg)[0]["status"] == "retrying"


class MeetServer:
    """tests/upstreams/servers/mcp_meet.py over Streamable HTTP, optionally as an older server."""

    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        cmd = [sys.executable, MEET, "--transport", "streamable-http", "--port", str(self.port), *flags]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def __enter__(self) -> MeetServer:
        wait_port(self.port, proc=self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def meet_servers() -> Iterator[dict[str, MeetServer]]:
    with MeetServer() as modern, MeetServer("--handshake-only") as handshake, MeetServer("--only-2024") as old:
        yield {"stateless": modern, "handshake": handshake, "only-2024": old}


def meet_cfg(kind: str, meet_servers: dict[str, MeetServer]) -> dict[str, Any]:
    if kind == "stdio":
        return {"name": "meet", "transport": "stdio", "command": sys.executable, "args": [MEET]}
    return {"name": "meet", "transport": "streamable-http", "url": meet_servers[kind].url}


@pytest.mark.parametrize(
    ("kind", "protocol"),
    # the handshake offers the reference's 2024-11-05 (CONTRACT 1.15); a stateless-capable server gets 2026-07-28
    [("stdio", "2024-11-05"), ("stateless", "2026-07-28"), ("handshake", "2024-11-05"), ("only-2024", "2024-11-05")],
)
async def test_each_server_gets_its_protocol_and_many_calls_run_at_once(
    registry_of: Any, meet_servers: dict[str, MeetServer], ctx: CallContext, kind: str, protocol: str
) -> None:
    reg: Registry = await registry_of(mcp_servers=[meet_cfg(kind, meet_servers)])
    upstream = reg.server("meet")
    assert upstream is not None and upstream.status == "ok"
    assert upstream.protocol == protocol
    # Each call returns only once all 16 are inside the tool together: calls sent or answered one at a
    # time would each wait out the server's 10 s and say "alone".
    meet = _tool(reg, "meet.meet")
    answers = await asyncio.gather(*(reg.call(meet, {"group": kind, "n": 16}, ctx) for _ in range(16)))
    assert [(a.status_code, a.result["content"][0]["text"]) for a in answers] == [(200, "met")] * 16


async def test_a_stateless_result_has_the_handshake_era_shape(
    registry_of: Any, meet_servers: dict[str, MeetServer], ctx: CallContext
) -> None:
    reg: Registry = await registry_of(
        mcp_servers=[
            {**meet_cfg("stateless", meet_servers), "name": "new"},
            {**meet_cfg("handshake", meet_servers), "name": "old"},
        ]
    )
    new, old = [await reg.call(_tool(reg, f"{n}.echo"), {"text": "same"}, ctx) for n in ("new", "old")]
    assert (
        new.result
        == old.result
        == {
            "content": [{"type": "text", "text": "same"}],
            "isError": False,
            "structuredContent": {"result": "same"},
        }
    )


@pytest.mark.parametrize("kind", ["stateless", "handshake"])
async def test_an_argument_annotated_x_mcp_header_travels_in_its_header_too(
    registry_of: Any, meet_servers: dict[str, MeetServer], ctx: CallContext, kind: str
) -> None:
    # The SDK refuses a stateless call whose Mcp-Param-Region header does not mirror the argument (-32020).
    reg: Registry = await registry_of(mcp_servers=[meet_cfg(kind, meet_servers)])
    for region in ("eu-west-1", "zürich"):  # the second travels base64-wrapped
        res = await reg.call(_tool(reg, "meet.route"), {"region": region}, ctx)
        assert (res.status_code, res.error, res.result["content"][0]["text"]) == (200, "", region)


async def test_a_timed_out_stateless_call_is_a_504_and_the_next_call_works(
    registry_of: Any, meet_servers: dict[str, MeetServer], ctx: CallContext
) -> None:
    reg: Registry = await registry_of(
        timings=replace(FAST, call_timeout=0.5), mcp_servers=[meet_cfg("stateless", meet_servers)]
    )
    waiting = await reg.call(_tool(reg, "meet.meet"), {"group": "nobody-else", "n": 2}, ctx)
    assert (waiting.status_code, waiting.timed_out) == (504, True)
    assert waiting.error == "upstream timed out after 500ms: MCP server meet did not answer"
    res = await reg.call(_tool(reg, "meet.echo"), {"text": "still here"}, ctx)
    assert res.result["content"][0]["text"] == "still here"
    assert _servers(reg)[0]["status"] == "ok"


async def test_a_stateless_server_restarted_with_other_tools_is_listed_again(registry_of: Any) -> None:
    server = McpHttpProcess("streamable-http").start()
    try:
        reg: Registry = await registry_of(
            start=False, mcp_servers=[{"name": "echo", "transport": "streamable-http", "url": server.url}]
        )
        upstream = reg.server("echo")
        assert upstream is not None
        upstream.relist_every = 0.1  # no session tells a stateless client of a restart: it asks again
        await reg.start()
        assert upstream.protocol == "2026-07-28" and reg.lookup("echo.extra") is None
        changes: list[int] = []
        reg.add_listener(lambda: changes.append(1))
        server.kill()
        server.env = {"MCP_ECHO_EXTRA_TOOL": "1"}
        server.start()
        await eventually(lambda: reg.lookup("echo.extra") is not None, what="the new tool")
        assert changes
    finally:
        server.kill()
