from __future__ import annotations

import msgspec
import pytest

from flux7.functions.memory import create_memory_app
from flux7.shared.decisions.memory_client import (
    InProcessMemory,
    MemoryToolError,
    MemoryUnavailable,
    RpcMemory,
    parse_memory_list,
)
from flux7.shared.memory.service import MemoryService
from tests.decisions.support import serve_asgi
from tests.support.http import free_port, serve_json

TAGS = ["decision", "approved", "fs.read", "agent:claude", "by:human"]


async def test_in_process_memory_returns_tool_text_and_lists_parse(memory_service: MemoryService) -> None:
    memory = InProcessMemory(memory_service)
    text = await memory.call_tool(
        "memory_store", {"key": "decision.fs.read.a1", "value": "v", "tags": TAGS, "agent": "flux7-mesh"}
    )
    assert text.startswith("Memory 'decision.fs.read.a1' created")
    listed = parse_memory_list(await memory.call_tool("memory_list", {"tags": ["decision", "by:human"]}))
    assert [(m.key, m.agent) for m in listed] == [("decision.fs.read.a1", "flux7-mesh")]
    assert set(listed[0].tags) == set(TAGS) and listed[0].updated.endswith("Z")


async def test_in_process_memory_raises_tool_error_on_a_failed_tool(memory_service: MemoryService) -> None:
    with pytest.raises(MemoryToolError, match="key and value are required"):
        await InProcessMemory(memory_service).call_tool("memory_store", {"key": ""})


def test_parse_memory_list_accepts_the_empty_answer_and_rejects_anything_else() -> None:
    assert parse_memory_list("No memories found.") == []
    good = "1 memories:\n- decision.x.1 [decision, approved] (by flux7-mesh) — 2026-10-01T10:00:00Z"
    assert parse_memory_list(good)[0].tags == ("decision", "approved")
    with pytest.raises(ValueError):
        parse_memory_list("3 results (ranked by relevance):\n\n## decision.x.1\napproved by ann")
    with pytest.raises(ValueError, match="announced 2"):
        parse_memory_list(good.replace("1 memories", "2 memories"))


async def test_rpc_memory_speaks_json_rpc_with_the_bearer_token(memory_service: MemoryService) -> None:
    # the same service behind mem7's own HTTP app, on a real port, with a token
    memory_service.config = msgspec.structs.replace(memory_service.config, token="s3cret")
    async with serve_asgi(create_memory_app(memory_service)) as url:
        good = RpcMemory(url, "s3cret")
        text = await good.call_tool("memory_store", {"key": "k1", "value": "v1", "tags": ["t"]})
        assert "created" in text
        assert "k1" in await good.call_tool("memory_list", {"tags": ["t"]})
        with pytest.raises(MemoryToolError, match="key and value are required"):
            await good.call_tool("memory_store", {"key": "k2"})
        await good.aclose()
        with pytest.raises(MemoryUnavailable, match="401"):
            await RpcMemory(url, "wrong").call_tool("memory_list", {})


async def test_rpc_memory_reports_an_unreachable_or_garbled_memory_as_unavailable() -> None:
    with pytest.raises(MemoryUnavailable, match="unreachable"):
        await RpcMemory(f"http://127.0.0.1:{free_port()}").call_tool("memory_list", {})
    garbled = (200, b"<html>not json</html>")
    with serve_json(lambda *_: garbled) as (url, _), pytest.raises(MemoryUnavailable, match="not JSON"):
        await RpcMemory(url).call_tool("memory_list", {})
    refused = (200, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "nope"}})
    with serve_json(lambda *_: refused) as (url, _), pytest.raises(MemoryToolError, match="nope"):
        await RpcMemory(url).call_tool("memory_list", {})
