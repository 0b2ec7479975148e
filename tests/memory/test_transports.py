"""The same tools over every transport, driven by the official MCP SDK client (mcp 2.x): stdio (local and
relayed to a daemon), sessionless Streamable HTTP /mcp and the deprecated SSE transport."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client, ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mem7 import Mem7

from tests.memory.stores import Stores

from .conftest import REPO, Mem7Process, free_port

pytestmark = pytest.mark.served

TOKEN = "transport-token"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, stores: Stores) -> Iterator[Mem7Process]:
    root = tmp_path_factory.mktemp("daemon") / "mem7"
    with Mem7Process(root, token=TOKEN, env=stores.env(root)) as proc:
        yield proc


def text_of(result: Any) -> str:
    return str(result.content[0].text)


def stdio_params(directory: Path, listen: str, token: str = "") -> StdioServerParameters:
    env = {**os.environ, "MEM7_DIR": str(directory), "MEM7_LISTEN": listen, "MEM7_HYBRID": "0"}
    env["MEM7_TOKEN"] = token
    return StdioServerParameters(command=sys.executable, args=["-m", "flux7.shared.memory.cli"], env=env, cwd=str(REPO))


async def test_stdio_serves_the_tools_locally_when_no_daemon_answers(tmp_path: Path) -> None:
    params = stdio_params(tmp_path / "local", f"127.0.0.1:{free_port()}")
    async with Client(params) as client:
        assert len((await client.list_tools()).tools) == 8
        stored = await client.call_tool("memory_store", {"key": "stdio.k", "value": "over stdio"})
        assert text_of(stored) == "Memory 'stdio.k' created (1 total entries)"
        recalled = await client.call_tool("memory_recall", {"key": "stdio.k"})
        assert text_of(recalled).startswith("## stdio.k\nover stdio\n")
        failed = await client.call_tool("memory_get", {"path": "../index.db"})
        assert failed.is_error and text_of(failed) == "path escapes workspace"
    assert list((tmp_path / "local" / "workspace" / "memory").glob("*.md"))


async def test_stdio_relays_to_a_running_daemon_with_its_token(tmp_path: Path, daemon: Mem7Process) -> None:
    params = stdio_params(tmp_path / "unused", f"127.0.0.1:{daemon.port}", token=TOKEN)
    async with Client(params) as client:
        stored = await client.call_tool("memory_store", {"key": "relayed.k", "value": "via the daemon"})
        assert text_of(stored).startswith("Memory 'relayed.k' created")
    assert "via the daemon" in Mem7(daemon.url, token=TOKEN).recall(key="relayed.k")
    assert not (tmp_path / "unused" / "index.db").exists()


async def test_streamable_http_mcp_with_a_stock_client(daemon: Mem7Process) -> None:
    import httpx2

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    transport = streamable_http_client(f"{daemon.url}/mcp", http_client=http, terminate_on_close=False)
    async with http, Client(transport) as client:  # the default mode: probes server/discover, falls back
        assert {t.name for t in (await client.list_tools()).tools} >= {"memory_store", "memory_history"}
        stored = await client.call_tool("memory_store", {"key": "mcp.k", "value": "streamable"})
        assert text_of(stored).startswith("Memory 'mcp.k'")
        searched = await client.call_tool("memory_search", {"query": "streamable"})
        assert "## mcp.k" in text_of(searched)


async def test_sse_transport_round_trips_tool_calls(daemon: Mem7Process) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with sse_client(f"{daemon.url}/sse", headers=headers) as streams, ClientSession(*streams[:2]) as session:
        await session.initialize()
        stored = await session.call_tool("memory_store", {"key": "sse.k", "value": "over sse"})
        assert text_of(stored).startswith("Memory 'sse.k'")
        listed = await session.call_tool("memory_list", {})
        assert "- sse.k — " in text_of(listed)
