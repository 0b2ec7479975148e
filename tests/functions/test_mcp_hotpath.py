"""POST /mcp is served ahead of Litestar (functions/fastpath.py): it must answer exactly as the Litestar route does.
The same requests go to an app with its fast paths and to one without (Litestar serves every route), with CORS off
and on, and are compared: status, headers in order (session ids aside), JSON body (ids, trace ids and times aside).
Each app gets its own handshake-era session first; a case's `{sid}` header is that app's session."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from litestar.testing import TestClient

from tests.functions.conftest import AGENT, LISTED, hot_and_routed
from tests.upstreams.servers.http_backend import Backend

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
SESSION = {**AGENT, **JSON, "Mcp-Session-Id": "{sid}"}


def rpc(method: str, params: Any = None, rid: Any = 1) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


def modern(method: str, name: str = "") -> dict[str, str]:
    h = {**AGENT, **JSON, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    return {**h, "Mcp-Name": name} if name else h


def call(name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return params


NOTE = {"noteId": "n1", "text": "hello"}

# (name, body bytes, headers)
CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("initialize", rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}), {**AGENT, **JSON}),
    ("initialize without a version", rpc("initialize", {}), {**AGENT, **JSON}),
    ("initialized notification", b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', SESSION),
    ("a response", b'{"jsonrpc": "2.0", "id": 4, "result": {}}', SESSION),
    ("ping", rpc("ping"), SESSION),
    ("tools/list", rpc("tools/list"), SESSION),
    ("tools/call allowed", rpc("tools/call", call("list_pets", {"limit": 2})), SESSION),
    ("tools/call string id", rpc("tools/call", call("list_pets", {}), rid="a-1"), SESSION),
    ("tools/call denied", rpc("tools/call", call("delete_pet", {"petId": "1"})), SESSION),
    ("tools/call denied by condition", rpc("tools/call", call("get_pet_by_id", {"petId": "2"})), SESSION),
    ("tools/call queued", rpc("tools/call", call("create_pet", {"name": "rex"})), SESSION),
    ("tools/call unknown tool", rpc("tools/call", call("nope", {})), SESSION),
    ("tools/call no name", rpc("tools/call", {"arguments": {}}), SESSION),
    ("tools/call arguments not an object", rpc("tools/call", {"name": "list_pets", "arguments": [1]}), SESSION),
    ("tools/call backend error", rpc("tools/call", call("get_boom", {})), SESSION),
    ("tools/call trace context", rpc("tools/call", call("echo_headers", {})), {**SESSION, "traceparent": TRACEPARENT}),
    ("operator-only virtual tool", rpc("tools/call", call("approval_resolve", {})), SESSION),
    ("unknown method", rpc("resources/list"), SESSION),
    ("bad JSON", b"{not json", SESSION),
    ("empty body", b"", {**AGENT, "Mcp-Session-Id": "{sid}"}),
    ("a batch", b"[" + rpc("ping") + b"]", SESSION),
    ("too deep", b"[" * 200 + b"]" * 200, SESSION),
    ("bad id", b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', SESSION),
    ("params not an object", b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": 3}', SESSION),
    ("no session header", rpc("tools/list"), {**AGENT, **JSON}),
    ("unknown session", rpc("tools/list"), {**SESSION, "Mcp-Session-Id": "f" * 32}),
    ("another agent's session", rpc("tools/list"), {**SESSION, "Authorization": "Bearer agent:other"}),
    ("no credentials", rpc("tools/list"), {**JSON, "Mcp-Session-Id": "{sid}"}),
    ("unknown agent token", rpc("tools/list"), {**SESSION, "Authorization": "Bearer f7a_nope"}),
    ("handshake version header", rpc("tools/list"), {**SESSION, "MCP-Protocol-Version": "2025-06-18"}),
    ("stateless call", rpc("tools/call", call("list_pets", {}, META)), modern("tools/call", "list_pets")),
    (
        "stateless denied",
        rpc("tools/call", call("delete_pet", {"petId": "1"}, META)),
        modern("tools/call", "delete_pet"),
    ),
    (
        "stateless queued",
        rpc("tools/call", call("put_notes_noteId", NOTE, META)),
        modern("tools/call", "put_notes_noteId"),
    ),
    ("stateless list", rpc("tools/list", {"_meta": META}), modern("tools/list")),
    ("stateless discover", rpc("server/discover", {"_meta": META}), modern("server/discover")),
    ("stateless unknown method", rpc("resources/list", {"_meta": META}), modern("resources/list")),
    ("stateless name mismatch", rpc("tools/call", call("list_pets", {}, META)), modern("tools/call", "other")),
    ("stateless method mismatch", rpc("tools/call", call("list_pets", {}, META)), modern("tools/list", "list_pets")),
    ("stateless without _meta", rpc("tools/call", call("list_pets", {})), modern("tools/call", "list_pets")),
    (
        "stateless no credentials",
        rpc("ping", {"_meta": META}),
        {**JSON, "MCP-Protocol-Version": MODERN, "Mcp-Method": "ping"},
    ),
    ("stateless notification", b'{"jsonrpc": "2.0", "method": "notifications/x"}', modern("notifications/x")),
    (
        "unknown version notification",
        b'{"jsonrpc": "2.0", "method": "n/x"}',
        {**modern("n/x"), "MCP-Protocol-Version": "2099-01-01"},
    ),
    ("unknown version request", rpc("ping", {"_meta": META}), {**modern("ping"), "MCP-Protocol-Version": "2099-01-01"}),
    ("stateless response", b'{"jsonrpc": "2.0", "id": 1, "result": {}}', modern("x")),
    (
        "session traffic with x-session-id",
        rpc("tools/call", call("list_pets", {}, META)),
        {**modern("tools/call", "list_pets"), "X-Session-Id": "s1"},
    ),
    ("not JSON", rpc("ping"), {**SESSION, "Content-Type": "text/plain"}),
    ("cross-site", rpc("ping"), {**SESSION, "Sec-Fetch-Site": "cross-site"}),
    ("foreign origin", rpc("ping"), {**SESSION, "Origin": "http://evil.example"}),
    ("listed origin", rpc("ping"), {**SESSION, "Origin": LISTED}),
    ("listed origin, not JSON", rpc("ping"), {**SESSION, "Origin": LISTED, "Content-Type": "text/plain"}),
    ("listed origin, no credentials", rpc("tools/list"), {**JSON, "Mcp-Session-Id": "{sid}", "Origin": LISTED}),
    ("too large", json.dumps({"x": "y" * 5000}).encode(), SESSION),
]

_HEX32 = re.compile(r"\b[0-9a-f]{32}\b")
_VOLATILE = {"latency_ms", "created_at", "expires_at", "valid_seconds", "timestamp", "date"}


def _scrub(value: Any) -> Any:
    """Ids, trace ids, span ids and times aside: they differ between two apps and two calls."""
    if isinstance(value, dict):
        return {k: ("<t>" if k in _VOLATILE else _scrub(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        if value.startswith("{") or value.startswith("["):
            try:
                return _scrub(json.loads(value))
            except ValueError:
                pass
        value = re.sub(r"\b[0-9a-f]{16}\b", "<span>", _HEX32.sub("<id>", value))
        value = re.sub(r"\b[0-9a-f]{8}\b", "<short id>", value)
        return re.sub(r"\d+(\.\d+)? ?(ms|s)\b", "<t>", value)
    return value


def _seen(r: Any) -> tuple[int, Any, list[tuple[str, str]]]:
    try:
        body = _scrub(r.json())
    except ValueError:
        body = r.content
    headers = []
    for k, v in r.headers.multi_items():
        if k == "content-length" and re.search(r"\b[0-9a-f]{8}\b", r.text):
            v = "<n>"
        elif k == "mcp-session-id":
            v = "<set>" if len(v) == 32 else v
        headers.append((k, v))
    return r.status_code, body, headers


def _open(client: TestClient[Any]) -> str:
    r = client.post("/mcp", content=rpc("initialize", {"protocolVersion": "2025-11-25"}), headers={**AGENT, **JSON})
    assert r.status_code == 200
    return str(r.headers["mcp-session-id"])


@pytest.fixture(params=[False, True], ids=["cors off", "cors on"])
def pair(
    tmp_path: Path, backend: Backend, request: pytest.FixtureRequest
) -> Iterator[tuple[TestClient[Any], TestClient[Any]]]:
    yield from hot_and_routed(tmp_path, backend, cors=request.param)


def _send(client: TestClient[Any], sid: str, body: bytes, headers: dict[str, str]) -> Any:
    return client.post("/mcp", content=body, headers={k: v.replace("{sid}", sid) for k, v in headers.items()})


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_mcp_hot_path_answers_as_the_litestar_route(
    pair: tuple[TestClient[Any], TestClient[Any]], case: tuple[str, bytes, dict[str, str]]
) -> None:
    hot, routed = pair
    _, body, headers = case
    expected = _seen(_send(routed, _open(routed), body, headers))
    got = _seen(_send(hot, _open(hot), body, headers))
    assert got == expected
    assert got[0] != 500


@pytest.mark.served
def test_the_served_mcp_hot_path_answers_as_the_litestar_route(served: tuple[httpx.Client, TestClient[Any]]) -> None:
    """Under `flux7 serve` POST /mcp is answered straight from granian's RSGI interface (functions/rsgi.py): every
    case answers as the Litestar route does (granian's own Server and Date headers aside, which it adds to every
    answer), with one Content-Length; a body over the size limit, left unread, closes its connection every time."""
    client, routed = served
    for name, body, headers in CASES:
        status, seen, routed_headers = _seen(_send(routed, _open(routed), body, headers))
        if status == 413:
            routed_headers.append(("connection", "close"))
        r = _send(cast(Any, client), _open(cast(Any, client)), body, headers)
        got_status, got, got_headers = _seen(r)
        assert (name, got_status, got) == (name, status, seen)
        host = str(client.base_url).rstrip("/")  # the public base URL in a 401's header names the host asked
        got_headers = [(k, v.replace(host, "http://testserver.local")) for k, v in got_headers]
        assert sorted(h for h in got_headers if h[0] not in ("server", "date")) == sorted(routed_headers), name
        assert r.headers.get_list("content-length") == [str(len(r.content))], name


def test_the_mcp_hot_path_serves_the_call_and_traces_it(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, _ = pair
    sid = _open(hot)
    r = _send(hot, sid, rpc("tools/call", call("list_pets", {"limit": 1})), SESSION)
    assert r.status_code == 200 and "error" not in r.json() and not r.json()["result"].get("isError"), r.text
    [t] = hot.get("/traces", params={"tool": "list_pets"}, headers={"Authorization": "Bearer adm1n"}).json()
    assert (t["tool"], t["policy"], t["status_code"], t["params"]) == ("list_pets", "allow", 200, {"limit": 1})


def test_a_session_ended_by_delete_is_unknown_to_the_hot_path(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, _ = pair
    sid = _open(hot)
    assert _send(hot, sid, rpc("ping"), SESSION).status_code == 200
    assert hot.delete("/mcp", headers={**AGENT, "Mcp-Session-Id": sid}).status_code == 204
    gone = _send(hot, sid, rpc("ping"), SESSION)
    assert gone.status_code == 404 and gone.json()["error"]["message"] == "Unknown session"
    assert hot.delete("/mcp", headers={**AGENT, "Mcp-Session-Id": sid}).status_code == 404


def test_other_methods_on_mcp_go_to_litestar(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, routed = pair
    for method in ("GET", "PUT", "PATCH"):
        a, b = hot.request(method, "/mcp", headers=AGENT), routed.request(method, "/mcp", headers=AGENT)
        assert (a.status_code, a.headers.get("allow"), a.json()) == (
            405,
            "POST, DELETE",
            {"error": "method not allowed"},
        )
        assert (b.status_code, b.headers.get("allow"), b.json()) == (a.status_code, a.headers.get("allow"), a.json())
