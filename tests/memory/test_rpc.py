"""/rpc, /mcp and the other memory routes (CONTRACT 2.1, 2.2), in process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from flux7.functions.memory import create_memory_app
from flux7.shared.memory.service import MemoryService

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(make_service: Any) -> Iterator[TestClient[Any]]:
    service = make_service(token=TOKEN)
    with TestClient(create_memory_app(service)) as c:
        yield c


def rpc(client: TestClient[Any], body: Any, **kw: Any) -> Any:
    response = client.post("/rpc", json=body, headers=AUTH, **kw)
    assert response.status_code == 200, response.text
    return response.json()


def test_protocol_errors_still_answer_http_200(client: TestClient[Any]) -> None:
    bad = client.post("/rpc", content=b"{not json", headers={**AUTH, "Content-Type": "application/json"})
    assert bad.status_code == 200
    body = bad.json()
    assert "id" not in body and body["error"]["code"] == -32700
    assert body["error"]["message"].startswith("parse error: ")
    assert rpc(client, {"jsonrpc": "1.0", "id": 7, "method": "tools/list"}) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32600, "message": "invalid request: jsonrpc must be 2.0"},
    }
    assert rpc(client, {"jsonrpc": "2.0", "id": "x", "method": "nope"})["error"] == {
        "code": -32601,
        "message": "method not found: nope",
    }
    # no special case for notifications, and no id in the answer when the request had none
    assert rpc(client, {"jsonrpc": "2.0", "method": "notifications/initialized"}) == {
        "jsonrpc": "2.0",
        "error": {"code": -32601, "message": "method not found: notifications/initialized"},
    }


def test_the_id_is_echoed_as_sent(client: TestClient[Any]) -> None:
    for request_id in (1, "abc", None, 2.5):
        assert rpc(client, {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})["id"] == request_id


def test_initialize_echoes_a_known_protocol_version(client: TestClient[Any]) -> None:
    def init(version: str) -> Any:
        params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        return rpc(client, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})["result"]

    assert init("2025-06-18")["protocolVersion"] == "2025-06-18"
    assert init("2024-11-05")["protocolVersion"] == "2024-11-05"
    result = init("1999-01-01")
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"] == {"tools": {}}
    assert result["serverInfo"]["name"] == "mem7"


def test_tools_list_has_the_eight_tools_with_schemas(client: TestClient[Any]) -> None:
    tools = rpc(client, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]
    assert [t["name"] for t in tools] == [
        "memory_store",
        "memory_recall",
        "memory_search",
        "memory_context",
        "memory_get",
        "memory_list",
        "memory_forget",
        "memory_history",
    ]
    store = tools[0]["inputSchema"]
    assert store["required"] == ["key", "value"]
    assert store["properties"]["tags"] == {
        "type": "array",
        "description": store["properties"]["tags"]["description"],
        "items": {"type": "string"},
    }


def test_tool_failures_are_results_with_is_error(client: TestClient[Any]) -> None:
    def call(params: Any) -> Any:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        if params is not ...:
            body["params"] = params
        return rpc(client, body)["result"]

    assert call(...) == {"content": [{"type": "text", "text": "missing params"}], "isError": True}
    assert call({"name": "memory_zap"}) == {
        "content": [{"type": "text", "text": "unknown tool: memory_zap"}],
        "isError": True,
    }
    ok = call({"name": "memory_store", "arguments": {"key": "k", "value": "v"}})
    assert ok == {"content": [{"type": "text", "text": "Memory 'k' created (1 total entries)"}]}


def test_snapshot_reminder_and_chain_methods(client: TestClient[Any]) -> None:
    reminder = rpc(client, {"jsonrpc": "2.0", "id": 1, "method": "memory/snapshot_reminder"})["result"]
    assert set(reminder) == {"reminder", "workspace", "memory_count", "generated_at"}
    assert reminder["memory_count"] == 0
    chain = rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "memory/chain"})["result"]
    assert chain["holds"] is True
    http = client.post("/memory/snapshot_reminder", headers=AUTH).json()
    assert http["reminder"] == reminder["reminder"]
    assert client.get("/memory/chain", headers=AUTH).json() == chain


def test_the_token_guards_every_route_but_healthz(client: TestClient[Any]) -> None:
    for method, path in [
        ("POST", "/rpc"),
        ("POST", "/mcp"),
        ("GET", "/memory/chain"),
        ("POST", "/memory/snapshot_reminder"),
        ("GET", "/sse"),
        ("POST", "/messages"),
    ]:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            json_headers = {**headers, "Content-Type": "application/json"}
            response = client.request(method, path, headers=json_headers, content=b"{}")
            assert (response.status_code, response.text) == (401, "unauthorized\n"), (method, path, headers)
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert client.post("/healthz").status_code == 405


def test_wrong_methods_get_405_in_plain_text(client: TestClient[Any]) -> None:
    response = client.get("/rpc", headers=AUTH)
    assert response.status_code == 405 and response.headers["content-type"].startswith("text/plain")
    for method in ("GET", "DELETE"):
        mcp = client.request(method, "/mcp", headers=AUTH)
        assert mcp.status_code == 405 and mcp.headers["allow"] == "POST"
    assert client.get("/nowhere").text == "404 page not found\n"


def test_mcp_answers_like_rpc_and_202_for_notifications(client: TestClient[Any]) -> None:
    note = client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=AUTH)
    assert (note.status_code, note.content) == (202, b"")
    listed = client.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=AUTH)
    assert listed.status_code == 200 and "mcp-session-id" not in listed.headers
    assert len(listed.json()["result"]["tools"]) == 8


def test_the_body_limit_is_eight_megabytes(client: TestClient[Any]) -> None:
    big = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","pad":"' + b"x" * (8 * 1024 * 1024) + b'"}'
    body = client.post("/rpc", content=big, headers={**AUTH, "Content-Type": "application/json"}).json()
    assert body["error"] == {"code": -32700, "message": "parse error: http: request body too large"}


def test_meta_identity_is_honoured_only_with_the_token(make_service: Any) -> None:
    service: MemoryService = make_service()
    meta = {"art.flux7/agent": "vouched"}
    service.call_tool("memory_store", {"key": "a", "value": "v", "agent": "declared"}, authenticated=False, meta=meta)
    service.call_tool("memory_store", {"key": "b", "value": "v", "agent": "declared"}, authenticated=True, meta=meta)
    listed, _ = service.call_tool("memory_list", {})
    assert "- b (by vouched)" in listed and "- a (by declared)" in listed
