"""`flux7 serve` runs the app on granian's RSGI interface (functions/rsgi.py): its fast paths answered straight, every
other request handed to Litestar through a bridge that must give it what granian's ASGI interface gave. These run
the real server and compare its answers with the same app served in process."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from flux7.functions import rsgi
from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import ADMIN, AGENT
from tests.support.server import Server, running_server

MCP = {**AGENT, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INITIALIZE = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}'


class _Headers:
    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items

    def items(self) -> list[tuple[str, str]]:
        return self._items


class _Scope:
    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.headers = _Headers(items)


def test_addresses_and_headers_are_read_as_granians_asgi_scope_gives_them() -> None:
    assert rsgi._address("127.0.0.1:5000") == ("127.0.0.1", "5000")
    assert rsgi._address("[::1]:5000") == ("::1", "5000")
    headers = [("x-trace-id", "first"), ("content-type", "application/json"), ("x-trace-id", "second")]
    assert rsgi._header_dict(_Scope(headers)) == {"x-trace-id": "first", "content-type": "application/json"}


@pytest.fixture
def both(config: Path) -> Iterator[tuple[Server, TestClient[Any]]]:
    """The config served by `flux7 serve` and, for comparison, the same app in process (its own store)."""
    (config.parent / "in-process").mkdir()
    local = load_settings(config, env={}, storage_path=str(config.parent / "in-process" / "flux7.db"))
    with running_server(config) as server, TestClient(create_app(Mesh(local))) as in_process:
        yield server, in_process


def _same(served: httpx.Response, local: httpx.Response) -> None:
    assert served.status_code == local.status_code, served.text
    assert served.content == local.content
    for name in ("content-type", "content-length", "allow", "cache-control"):
        assert served.headers.get_list(name) == local.headers.get_list(name), name


@pytest.mark.served
def test_litestar_routes_answer_through_the_bridge_as_in_process(both: tuple[Server, TestClient[Any]]) -> None:
    server, local = both
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as served:
        for method, path, headers in (
            ("GET", "/tool/", AGENT),  # a path no route has: Litestar's 404 page
            ("GET", "/tool%20x", AGENT),  # an escaped path
            ("GET", "/mcp", AGENT),  # a 405 with its Allow header
            ("HEAD", "/policies", ADMIN),  # HEAD answers as GET: the head only
            ("GET", "/policies", {}),  # no credentials
            ("GET", "/schema/openapi.json", {}),
            ("GET", "/console/", {}),  # a static file: granian sends it (http.response.pathsend)
        ):
            _same(served.request(method, path, headers=headers), local.request(method, path, headers=headers))
        # the query string reaches the handler
        served.post("/tool/list_pets", json={"params": {"limit": 1}}, headers=AGENT).raise_for_status()
        found = served.get("/traces", params={"tool": "list_pets", "limit": "1"}, headers=ADMIN)
        assert [t["tool"] for t in found.json()] == ["list_pets"]
        assert served.get("/traces", params={"tool": "nope"}, headers=ADMIN).json() == []


def _chunked(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: mesh\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]))
    return (head + "\r\n").encode() + chunks + b"0\r\n\r\n"


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the answer"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    while len(body) < int(fields["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), fields, body


@pytest.mark.served
def test_a_chunked_body_reaches_litestar_whole_through_the_bridge(both: tuple[Server, TestClient[Any]]) -> None:
    """POST /mcp without a Content-Length is Litestar's (a fast path takes only declared lengths): the bridge hands
    the body over chunk by chunk, and the handshake it carries is answered."""
    server, _ = both
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_chunked("/mcp", INITIALIZE, MCP))
        status, fields, body = _answer(sock)
        assert status == 200, body
        assert json.loads(body)["result"]["protocolVersion"] == "2025-06-18"
        assert len(fields["mcp-session-id"]) == 32
        # the connection stays usable: a governed call on it next
        call = b'{"params": {"limit": 1}}'
        head = f"POST /tool/list_pets HTTP/1.1\r\nHost: mesh\r\nAuthorization: {AGENT['Authorization']}\r\n"
        sock.sendall(f"{head}Content-Type: application/json\r\nContent-Length: {len(call)}\r\n\r\n".encode() + call)
        status, _, body = _answer(sock)
        assert status == 200 and json.loads(body)["policy"] == "allow", body


class _Protocol:
    """granian's RSGI protocol as the bridge uses it, recording what happened in order."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.events: list[str] = []

    async def __call__(self) -> bytes:
        self.events.append("body read")
        return self.body

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.events.append(f"answered {status}")


class _RequestScope:
    def __init__(self, headers: list[tuple[str, str]]) -> None:
        self.headers = _Headers(headers)
        self.headers.get = dict(headers).get  # type: ignore[attr-defined]


async def _refuse(bridge: rsgi._Bridge) -> None:
    """An app that answers 415 without reading the body (the browser guard does)."""
    await bridge.send({"type": "http.response.start", "status": 415, "headers": []})
    await bridge.send({"type": "http.response.body", "body": b"{}"})


@pytest.mark.parametrize(
    ("length", "events"),
    [
        ("45", ["body read", "answered 415"]),  # within the cap: read first, so granian keeps the connection
        ("1024", ["body read", "answered 415"]),
        ("1025", ["answered 415"]),  # over the cap: refused without taking it in
        ("0", ["answered 415"]),
        (None, ["answered 415"]),  # chunked or bodiless
    ],
)
async def test_a_body_the_app_never_read_is_read_before_the_answer_when_within_the_cap(
    length: str | None, events: list[str]
) -> None:
    """granian keeps a connection alive after an answer to a request whose body was not read only when the body's
    bytes had already arrived; otherwise it closes it and adds `connection: close` (a client late with its body by a
    few milliseconds saw the served MCP hot path's "not JSON" case differ from Litestar's). The bridge reads such a
    body first, so the answer does not depend on packet timing."""
    protocol = _Protocol(b"x" * 45)
    headers = [("content-type", "text/plain")] + ([("content-length", length)] if length is not None else [])
    await _refuse(rsgi._Bridge(_RequestScope(headers), protocol, body_cap=1024))
    assert protocol.events == events


async def test_a_body_the_app_read_is_not_read_again() -> None:
    protocol = _Protocol(b"{}")
    bridge = rsgi._Bridge(_RequestScope([("content-length", "2")]), protocol, body_cap=1024)

    async def body() -> Any:
        yield b"{}"

    protocol.__aiter__ = lambda: body().__aiter__()  # type: ignore[method-assign]
    assert (await bridge.receive())["body"] == b"{}"
    await _refuse(bridge)
    assert protocol.events == ["answered 415"]
