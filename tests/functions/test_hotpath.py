"""POST /tool/{name} is served ahead of Litestar (functions/fastpath.py): it must answer exactly as the Litestar
route does. The same requests go to an app with its fast paths and to one without (Litestar serves every route),
with CORS off and on, and are compared: status, JSON body (trace ids and latencies aside), headers."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from litestar.testing import TestClient

from flux7.functions.raw_asgi import serve as serve_fast
from tests.functions.conftest import AGENT, LISTED, hot_and_routed, make_config
from tests.support.server import running_server
from tests.upstreams.servers.http_backend import Backend

JSON = {"Content-Type": "application/json"}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# (name, path, body bytes, headers)
CASES: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("allowed", "/tool/list_pets", b'{"params": {"limit": 2}}', {**AGENT, **JSON}),
    ("arguments unwrapped", "/tool/get_pet_by_id", b'{"petId": "1"}', {**AGENT, **JSON}),
    ("no body", "/tool/list_pets", b"", AGENT),
    ("denied", "/tool/delete_pet", b'{"params": {"petId": "1"}}', {**AGENT, **JSON}),
    ("denied by condition", "/tool/get_pet_by_id", b'{"params": {"petId": "2"}}', {**AGENT, **JSON}),
    ("unknown tool", "/tool/nope", b"{}", {**AGENT, **JSON}),
    ("malformed JSON", "/tool/list_pets", b"{not json", {**AGENT, **JSON}),
    ("params not an object", "/tool/list_pets", b'{"params": "x"}', {**AGENT, **JSON}),
    ("body not an object", "/tool/list_pets", b"[1]", {**AGENT, **JSON}),
    ("too deep", "/tool/list_pets", b"[" * 200 + b"]" * 200, {**AGENT, **JSON}),
    ("too large", "/tool/list_pets", json.dumps({"x": "y" * 5000}).encode(), {**AGENT, **JSON}),
    ("not JSON", "/tool/list_pets", b"{}", {**AGENT, "Content-Type": "text/plain"}),
    ("cross-site", "/tool/list_pets", b"{}", {**AGENT, **JSON, "Sec-Fetch-Site": "cross-site"}),
    ("foreign origin", "/tool/list_pets", b"{}", {**AGENT, **JSON, "Origin": "http://evil.example"}),
    ("listed origin", "/tool/list_pets", b"{}", {**AGENT, **JSON, "Origin": LISTED}),
    (
        "listed origin, cross-site",
        "/tool/list_pets",
        b"{}",
        {**AGENT, **JSON, "Origin": LISTED, "Sec-Fetch-Site": "cross-site"},
    ),
    ("listed origin, not JSON", "/tool/list_pets", b"{}", {**AGENT, "Origin": LISTED, "Content-Type": "text/plain"}),
    ("listed origin, with a cookie", "/tool/get_boom", b"{}", {**AGENT, **JSON, "Origin": LISTED, "Cookie": "a=b"}),
    ("unknown agent token", "/tool/list_pets", b"{}", {"Authorization": "Bearer f7a_nope", **JSON}),
    ("private callback", "/tool/list_pets", b"{}", {**AGENT, **JSON, "X-Callback-URL": "http://127.0.0.1:9/x"}),
    ("backend error", "/tool/get_boom", b"{}", {**AGENT, **JSON}),
    ("trace context", "/tool/echo_headers", b"{}", {**AGENT, **JSON, "traceparent": TRACEPARENT}),
    ("caller's trace id", "/tool/echo_headers", b"{}", {**AGENT, **JSON, "X-Trace-Id": "run-7:step.2"}),
    ("unusable trace id", "/tool/echo_headers", b"{}", {**AGENT, **JSON, "X-Trace-Id": "not valid!"}),
]
_VOLATILE = ("trace_id", "latency_ms")


def _seen(r: Any) -> tuple[int, Any, dict[str, str]]:
    body = r.json()
    if isinstance(body, dict):
        body = {k: ("<set>" if k in _VOLATILE and v not in ("", 0) else v) for k, v in body.items()}
        if body.get("trace_id") == "<set>" and r.json()["trace_id"] == TRACEPARENT[3:35]:
            body["trace_id"] = "caller's"
        result = body.get("result")
        if isinstance(result, dict):  # the echoed trace headers carry a new span id each call
            body["result"] = sorted(result)
    headers = {k: v for k, v in r.headers.items() if k in ("content-type", "retry-after", "vary")}
    headers.update((k, v) for k, v in r.headers.items() if k.startswith("access-control-"))
    if "x-trace-id" in r.headers:
        headers["x-trace-id"] = "<set>" if r.headers["x-trace-id"] == r.json().get("trace_id") else "differs"
    return r.status_code, body, headers


@pytest.fixture(params=[False, True], ids=["cors off", "cors on"])
def pair(
    tmp_path: Path, backend: Backend, request: pytest.FixtureRequest
) -> Iterator[tuple[TestClient[Any], TestClient[Any]]]:
    yield from hot_and_routed(tmp_path, backend, cors=request.param)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_hot_path_answers_as_the_litestar_route(
    pair: tuple[TestClient[Any], TestClient[Any]], case: tuple[str, str, bytes, dict[str, str]]
) -> None:
    hot, routed = pair
    _, path, body, headers = case
    expected = _seen(routed.post(path, content=body, headers=headers))
    got = _seen(hot.post(path, content=body, headers=headers))
    assert got == expected
    assert got[0] != 500


@pytest.mark.served
def test_the_served_hot_path_answers_as_the_litestar_route(served: tuple[httpx.Client, TestClient[Any]]) -> None:
    """Under `flux7 serve` the governed call is answered straight from granian's RSGI interface (functions/rsgi.py):
    every case answers as the Litestar route does, with one Content-Length."""
    client, routed = served
    for name, path, body, headers in CASES:
        expected = _seen(routed.post(path, content=body, headers=headers))
        r = client.post(path, content=body, headers=headers)
        assert (name, _seen(r)) == (name, expected)
        assert r.headers.get_list("content-length") == [str(len(r.content))], name


def test_the_hot_path_traces_the_call_it_answers(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, _ = pair
    r = hot.post("/tool/list_pets", json={"params": {"limit": 1}}, headers={**AGENT, "x-session-id": "s9"})
    assert r.status_code == 200
    trace_id = r.json()["trace_id"]
    [t] = hot.get("/traces", params={"trace": trace_id}, headers={"Authorization": "Bearer adm1n"}).json()
    assert (t["tool"], t["policy"], t["status_code"], t["session_id"], t["params"]) == (
        "list_pets",
        "allow",
        200,
        "s9",
        {"limit": 1},
    )


def test_paths_that_are_not_one_tool_name_go_to_litestar(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, _ = pair
    for path in ("/tool/", "/tool/list_pets/extra"):
        r = hot.post(path, content=b"{}", headers={**AGENT, **JSON})
        assert r.status_code == 404 and r.text == "404 page not found\n"
    assert hot.head("/tool/list_pets", headers=AGENT).status_code == 405  # HEAD answers as GET: no GET here


def _answers(sock: socket.socket, n: int) -> list[tuple[int, Any]]:
    """`n` HTTP/1.1 answers (Content-Length framed) read off one connection, in order."""
    buf = b""
    out: list[tuple[int, Any]] = []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} answers"
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(fields["content-length"])
        while len(buf) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside an answer"
            buf += chunk
        out.append((int(lines[0].split()[1]), json.loads(buf[:length])))
        buf = buf[length:]
    return out


def _limit(answer: Any) -> int | None:
    """The limit the backend was asked for (it echoes its query)."""
    sent = answer["result"]["query"].get("limit")
    return int(sent[0]) if sent else None


def _request(body: bytes | None, *, chunked: bool = False, limit: int = 1) -> bytes:
    head = "POST /tool/list_pets HTTP/1.1\r\nHost: mesh\r\nAuthorization: Bearer agent:claude\r\n"
    head += "Content-Type: application/json\r\n"
    if body is None:
        body = json.dumps({"params": {"limit": limit}}).encode()
    if chunked:  # no declared length: the body is read to its end
        half = len(body) // 2
        parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p)
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + parts + b"0\r\n\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.served
def test_bodies_of_every_framing_are_read_whole_on_one_kept_alive_connection(tmp_path: Path, backend: Backend) -> None:
    """Under granian, a body of a declared length is taken once its bytes are in (its empty end event is not
    waited for): the connection must stay usable, pipelined requests must not run into each other, and bodies
    sent chunked or declared empty must still be read as the Litestar route reads them."""
    config = make_config(tmp_path, backend, "auth: {admin_token: adm1n}")
    with running_server(config) as server, socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        for limit in (1, 2, 3):  # one after the other on one connection
            sock.sendall(_request(None, limit=limit))
            [(status, body)] = _answers(sock, 1)
            assert status == 200 and _limit(body) == limit, body
        # pipelined: three requests in one write, answered in order, each with its own arguments
        sock.sendall(b"".join(_request(None, limit=n) for n in (2, 1, 3)))
        assert [(s, _limit(b)) for s, b in _answers(sock, 3)] == [(200, 2), (200, 1), (200, 3)]
        # chunked, a declared empty body, then a malformed one of a declared length: all read as sent
        sock.sendall(_request(json.dumps({"params": {"limit": 2}}).encode(), chunked=True))
        [(status, body)] = _answers(sock, 1)
        assert status == 200 and _limit(body) == 2, body
        sock.sendall(_request(b""))
        [(status, body)] = _answers(sock, 1)
        assert status == 200 and body["policy"] == "allow" and _limit(body) is None, body
        sock.sendall(_request(b"{not json") + _request(None, limit=1))
        assert [(s, b.get("error")) for s, b in _answers(sock, 2)] == [(400, "invalid JSON body"), (200, None)]


def test_a_body_of_declared_length_is_taken_once_its_bytes_are_in(
    pair: tuple[TestClient[Any], TestClient[Any]],
) -> None:
    """granian sends the body's bytes with more_body set, then an empty end event, each a hop from its I/O thread
    to the event loop: the fast path answers without waiting for the second (here, a disconnect if asked for)."""
    hot_client, _ = pair
    app = cast(Any, hot_client.app)
    body = b'{"params": {"limit": 2}}'
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/tool/list_pets",
        "headers": [
            (b"host", b"mesh"),
            (b"authorization", b"Bearer agent:claude"),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 5000),
    }
    cases = [(body, [body]), (body, [body[:5], body[5:]]), (b"", [])]  # one event, two, none (declared empty)

    async def serve(declared: bytes, events: list[bytes]) -> list[dict[str, Any]]:
        queue = [{"type": "http.request", "body": e, "more_body": True} for e in events]
        queue.append({"type": "http.disconnect"})  # what asking past the declared bytes would get
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        length = [(b"content-length", str(len(declared)).encode())]
        await app({**scope, "headers": scope["headers"] + length}, receive, send)
        assert queue == [{"type": "http.disconnect"}]  # never asked for
        return sent

    for declared, events in cases:
        sent = hot_client.blocking_portal.call(serve, declared, events)
        assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
        assert sent[0]["status"] == 200
        query = json.loads(sent[1]["body"])["result"]["query"]
        assert query.get("limit") == (["2"] if declared else None)


def test_the_fast_paths_decline_what_their_rule_leaves_to_litestar(
    pair: tuple[TestClient[Any], TestClient[Any]],
) -> None:
    """A chunked body, a malformed or over-the-cap Content-Length, no Host: the fast path reads and sends nothing,
    and Litestar answers (functions/fastpath.py, the rule)."""
    hot_client, _ = pair
    app = cast(Any, hot_client.app)
    base = [(b"authorization", b"Bearer agent:claude"), (b"content-type", b"application/json")]
    host = [(b"host", b"mesh")]
    declined = [
        host,  # chunked: no Content-Length
        [*host, (b"content-length", b" 2")],
        [*host, (b"content-length", "²".encode("latin-1"))],
        [*host, (b"content-length", b"1025")],  # over max_body_bytes (1024)
        [(b"content-length", b"2")],  # no Host
    ]

    async def fast(headers: list[tuple[bytes, bytes]]) -> bool:
        async def receive() -> dict[str, Any]:
            raise AssertionError("a declined request's body is Litestar's to read")

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError("a declined request is Litestar's to answer")

        scope = {"type": "http", "method": "POST", "path": "/tool/list_pets", "headers": base + headers}
        handler = app.fast.route("POST", "/tool/list_pets")
        return bool(await serve_fast(app.fast, handler, scope, receive, send))

    for headers in declined:
        assert not hot_client.blocking_portal.call(fast, headers), headers


_FAKE_LOOP = """def new_event_loop():
    raise RuntimeError("the {name} stand-in was chosen as the event loop")
"""


@pytest.mark.served
def test_the_served_mesh_runs_asyncios_loop_when_uvloop_or_rloop_is_installed(tmp_path: Path, backend: Backend) -> None:
    """granian's default loop is rloop or uvloop when importable; uvloop's transports broke every forwarded call
    (the upstream client takes asyncio's), so `flux7 serve` asks for asyncio's loop. Stand-ins on the server's
    path (its working folder comes first for `python -m`) fail the start if they are chosen."""
    config = make_config(tmp_path, backend, "auth: {admin_token: adm1n}")
    for name in ("uvloop", "rloop"):
        (config.parent / f"{name}.py").write_text(_FAKE_LOOP.format(name=name))
    with running_server(config) as server, socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_request(None, limit=2))
        [(status, body)] = _answers(sock, 1)
        assert status == 200 and _limit(body) == 2, body
    assert "stand-in" not in server.log.read_text()
