"""The official MCP SDK client (mcp 2.x) against `/mcp` on a real daemon: its default mode (server/discover, the
stateless 2026-07-28 revision) and its legacy mode (initialize and a session)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.mcp_server.conftest import Daemon, approval_id_in, run_daemon, write_config

pytestmark = pytest.mark.served

MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp: Path = tmp_path_factory.mktemp("mcp-http")
    with run_daemon(write_config(tmp), tools=11) as d:
        yield d


@asynccontextmanager
async def connect(daemon: Daemon, agent: str, mode: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer agent:{agent}"}, timeout=30)
    async with http, Client(streamable_http_client(daemon.mcp_url, http_client=http), mode=mode) as client:
        yield client


def text_of(result: object) -> str:
    content = result.content  # type: ignore[attr-defined]
    assert len(content) == 1 and content[0].type == "text"
    return str(content[0].text)


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_connects_in_its_mode_and_lists_governed_and_virtual_tools(daemon: Daemon, mode: str) -> None:
    async with connect(daemon, "claude", mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        assert client.server_info is not None and client.server_info.name == "flux7-mesh"
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"echo.echo", "echo.search", "say.run", "grant.list", "mesh.catalog"} <= set(tools)
    assert not {"approval.resolve", "approval.pending", "grant.create", "grant.revoke"} & set(tools)
    # The upstream's property schemas pass through verbatim (the SDK server wrote this anyOf).
    tags = tools["echo.search"].input_schema["properties"]["tags"]
    assert tags["anyOf"][0] == {"items": {"type": "string"}, "type": "array"}
    assert tools["echo.search"].input_schema["required"] == ["query"]


@pytest.mark.parametrize("mode", MODES)
async def test_allowed_call_returns_the_upstream_result_as_it_came(daemon: Daemon, mode: str) -> None:
    async with connect(daemon, "claude", mode) as client:
        result = await client.call_tool("echo.echo", {"text": "a<b"})
    assert result.is_error is False
    assert text_of(result) == "a<b"
    assert result.structured_content == {"result": "a<b"}  # the SDK server's own structured output


@pytest.mark.parametrize("mode", MODES)
async def test_denied_call_says_policy_denied_as_an_error_result(daemon: Daemon, mode: str) -> None:
    async with connect(daemon, "claude", mode) as client:
        result = await client.call_tool("echo.write_file", {"path": "/nonexistent/x", "content": "x"})
    assert text_of(result) == "Policy denied: policy=claude tool=echo.write_file action=deny"
    assert result.is_error is True
    assert not Path("/nonexistent/x").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_call_needing_approval_runs_once_after_approval(daemon: Daemon, mode: str, tmp_path: Path) -> None:
    target = tmp_path / f"note-{mode}.txt"
    target.write_text("approved content")
    args = {"path": str(target)}
    async with connect(daemon, "claude", mode) as client:
        first = text_of(await client.call_tool("echo.read_file", args))
        approval = approval_id_in(first)
        assert first.startswith(f"Approval required (id: {approval[:8]}) for echo.read_file, valid ")
        assert "call echo.read_file again with the same arguments" in first
        again = text_of(await client.call_tool("echo.read_file", args))
        assert approval_id_in(again) == approval  # the same request, not a second one

        resolved = httpx.post(f"{daemon.url}/approvals/{approval}/approve", json={"resolved_by": "alice"})
        assert resolved.status_code == 200

        ran = await client.call_tool("echo.read_file", args)
        assert text_of(ran) == "approved content" and ran.is_error is False
        after = text_of(await client.call_tool("echo.read_file", args))
        assert approval_id_in(after) != approval  # an approval is used up by the call it approved


@pytest.mark.parametrize("mode", MODES)
async def test_denied_approval_tells_the_agent_not_to_retry(daemon: Daemon, mode: str) -> None:
    args = {"path": f"/etc/denied-{mode}"}
    async with connect(daemon, "claude", mode) as client:
        approval = approval_id_in(text_of(await client.call_tool("echo.read_file", args)))
        assert httpx.post(f"{daemon.url}/approvals/{approval}/deny", json={"resolved_by": "bob"}).status_code == 200
        result = await client.call_tool("echo.read_file", args)
    assert text_of(result) == f"Approval denied by bob for echo.read_file (id: {approval[:8]}): do not retry this call."
    assert result.is_error


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_tool_is_a_jsonrpc_invalid_params_error(daemon: Daemon, mode: str) -> None:
    async with connect(daemon, "claude", mode) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("echo.nope", {})
    assert err.value.error.code == -32602
    assert err.value.error.message == "Unknown tool: echo.nope"


@pytest.mark.parametrize("mode", MODES)
async def test_traceparent_in_meta_becomes_the_calls_trace_id(daemon: Daemon, mode: str) -> None:
    trace_id = ("a1" if mode == "auto" else "b2") * 16
    async with connect(daemon, "claude", mode) as client:
        await client.call_tool(
            "echo.echo",
            {"text": "traced"},
            meta={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},  # type: ignore[arg-type]
        )
    entries = httpx.get(f"{daemon.url}/traces", params={"trace": trace_id}).json()
    assert [e["tool"] for e in entries] == ["echo.echo"]
    assert entries[0]["agent_id"] == "claude" and entries[0]["policy"] == "allow"


async def test_the_upstream_sees_the_trace_and_with_forward_identity_the_agent(daemon: Daemon) -> None:
    trace_id = "c3" * 16
    async with connect(daemon, "claude", "auto") as client:
        result = await client.call_tool(
            "echo.whoami",
            {},
            meta={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},  # type: ignore[arg-type]
        )
    upstream_meta = json.loads(text_of(result))
    assert upstream_meta["art.flux7/agent"] == "claude"
    assert upstream_meta["traceparent"].split("-")[1] == trace_id


async def test_supervisor_agent_sees_and_uses_the_operator_tools(daemon: Daemon) -> None:
    async with connect(daemon, "claude", "auto") as agent:
        pending = approval_id_in(text_of(await agent.call_tool("echo.read_file", {"path": "/etc/supervised"})))
    async with connect(daemon, "boss", "auto") as boss:
        names = {t.name for t in (await boss.list_tools()).tools}
        assert {"approval.resolve", "approval.pending", "grant.create", "grant.revoke"} <= names
        listing = text_of(await boss.call_tool("approval.pending", {}))
        assert f"- {pending[:8]} echo.read_file by claude" in listing
        denied = await boss.call_tool("approval.resolve", {"id": pending[:8], "decision": "deny"})
    assert text_of(denied) == f"Denied (id: {pending[:8]}) for echo.read_file."
    detail = httpx.get(f"{daemon.url}/approvals/{pending}").json()
    assert detail["status"] == "denied" and detail["resolved_by"] == "mcp:boss"
