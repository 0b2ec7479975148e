"""Per-upstream connect and read timeouts: a hanging upstream is a clear 504 after its own configured time.

Real loopback peers: a port whose accept queue is full (a connect that never completes) and a server that
accepts and reads but never answers; the official SDK's MCP server with a tool that waits forever (over
Streamable HTTP and stdio); `sleep` as a CLI tool. The mesh is a real `flux7 serve`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flux7.shared.errors import ConfigError
from flux7.shared.settings import load_settings
from flux7.shared.upstreams import CallContext, Registry
from tests.support.server import Server, running_server
from tests.upstreams.conftest import FAST
from tests.upstreams.servers.launch import free_port, wait_port
from tests.upstreams.test_mcp import MEET, MeetServer

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}


@contextmanager
def never_connects(port: int = 0) -> Iterator[int]:
    """A listening port whose accept queue is full: the kernel drops further SYNs, so a connect hangs."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))  # takes the only place in the queue
    probe = socket.socket()
    probe.settimeout(0.5)
    with pytest.raises(TimeoutError):  # the premise: a connect here does hang
        probe.connect(("127.0.0.1", port))
    probe.close()
    try:
        yield port
    finally:
        filler.close()
        listener.close()


@contextmanager
def _accepting(handle: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    """A loopback listener handing each connection it accepts to `handle` (with the stop event); the port is
    yielded, and at exit the listener stops and every connection is closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)
            handle(conn, stop)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@contextmanager
def never_answers() -> Iterator[int]:
    """Accepts every connection and reads what comes, and never writes a byte back."""
    with _accepting(lambda conn, _stop: conn.setblocking(False)) as port:
        yield port


def _spec(operation: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.0",
        "info": {"title": operation, "version": "1"},
        "paths": {f"/{operation}": {"get": {"operationId": operation, "responses": {"200": {"description": "ok"}}}}},
    }


@contextmanager
def meet_over_sse() -> Iterator[str]:
    """mcp_meet.py over SSE: its /sse URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, MEET, "--transport", "sse", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}/sse"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def mesh(tmp_path: Path, engine_env: str) -> Iterator[Server]:
    """flux7 serve on the engine's store (engine_env: FLUX7_DATABASE_URL on PostgreSQL), so its traces land there."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "all.yaml").write_text("name: all\nagent: '*'\nrules: [{tools: ['*'], action: allow}]\n")
    (tmp_path / "read.json").write_text(json.dumps(_spec("slowRead")))
    (tmp_path / "connect.json").write_text(json.dumps(_spec("slowConnect")))
    with never_answers() as mute, never_connects() as full, MeetServer() as meet, meet_over_sse() as sse:
        config = tmp_path / "config.yaml"
        # PostgreSQL refuses a trace_file: the one chain is in the database
        trace_file = "" if engine_env else f"trace_file: {tmp_path}/traces.jsonl"
        config.write_text(
            f"""
storage_path: {tmp_path}/flux7.db
{trace_file}
policy_dir: policies
auth: {{admin_token: adm1n}}
memory: {{enabled: false}}
openapi:
  - file: read.json
    backend_url: http://127.0.0.1:{mute}
    timeout: {{connect: 5s, read: 1s}}
  - file: connect.json
    backend_url: http://127.0.0.1:{full}
    timeout: {{connect: 1s, read: 20s}}
mcp_servers:
  - name: meet
    transport: streamable-http
    url: {meet.url}
    timeout: {{read: 1s}}
  - name: meetsse
    transport: sse
    url: {sse}
    timeout: {{connect: 2s, read: 1s}}
  - name: meetio
    transport: stdio
    command: {sys.executable}
    args: [{MEET}]
    timeout: {{read: 1500ms}}
cli_tools:
  - name: nap
    bin: sleep
    bare: {{timeout: 500ms}}
"""
        )
        with running_server(config) as server:
            yield server


def _call(server: Server, tool: str, params: dict[str, Any]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = httpx.post(f"{server.url}/tool/{tool}", json={"params": params}, headers=AGENT, timeout=60)
    return r, time.monotonic() - started


CASES = {
    # tool, params, error, the configured time in seconds
    "OpenAPI backend that never answers": ("slow_read", {}, "upstream timed out after 1s (GET /slowRead)", 1.0),
    "OpenAPI backend that never accepts": ("slow_connect", {}, "upstream connect timed out after 1s", 1.0),
    "MCP over Streamable HTTP": (
        "meet.meet",
        {"group": "alone", "n": 2},
        "upstream timed out after 1s: MCP server meet did not answer",
        1.0,
    ),
    "MCP over SSE": (
        "meetsse.meet",
        {"group": "alone", "n": 2},
        "upstream timed out after 1s: MCP server meetsse did not answer",
        1.0,
    ),
    "MCP over stdio": (
        "meetio.meet",
        {"group": "alone", "n": 2},
        "upstream timed out after 1.5s: MCP server meetio did not answer",
        1.5,
    ),
    "CLI tool that sleeps": ("nap.run", {"args": ["30"]}, "command timed out after 500ms", 0.5),
}


@pytest.mark.served
def test_each_kind_of_hanging_upstream_is_a_504_after_its_own_timeout_and_traced_as_an_error(mesh: Server) -> None:
    tools = {t["name"] for t in httpx.get(f"{mesh.url}/tools", headers=AGENT).json()}
    assert {"slow_read", "slow_connect", "meet.meet", "meetsse.meet", "meetio.meet", "nap.run"} <= tools, tools
    for case, (tool, params, error, seconds) in CASES.items():
        r, took = _call(mesh, tool, params)
        assert r.status_code == 504, (case, r.text)
        assert r.json()["error"].startswith(error), (case, r.json())
        assert seconds * 0.9 <= took < seconds + 15, (case, took)  # its own time, not a fixed 30 s hold
        trace = httpx.get(f"{mesh.url}/traces", params={"tool": tool}, headers=ADMIN).json()[-1]
        assert trace["trace_id"] == r.json()["trace_id"], case
        assert trace["error"].startswith(error) and trace["status_code"] == 504, (case, trace)
    # The upstreams that hung still serve what answers.
    r, _ = _call(mesh, "meet.echo", {"text": "still here"})
    assert r.status_code == 200, r.text
    r, _ = _call(mesh, "nap.run", {"args": ["0"]})
    assert r.status_code == 200, r.text


@pytest.mark.served
async def test_over_mcp_a_timed_out_call_is_an_is_error_result(mesh: Server) -> None:
    http = httpx2.AsyncClient(headers=AGENT, timeout=60)
    async with http, Client(streamable_http_client(f"{mesh.url}/mcp", http_client=http)) as client:
        for tool, params, error, _ in CASES.values():
            result = await client.call_tool(tool, params)
            assert result.is_error, (tool, result)
            assert error in result.content[0].text, (tool, result.content)  # type: ignore[union-attr]
        ok = await client.call_tool("meet.echo", {"text": "fine"})
        assert not ok.is_error


@pytest.mark.served
async def test_a_streamable_http_server_that_stops_accepting_is_a_connect_timeout(
    registry_of: Any, ctx: CallContext
) -> None:
    with MeetServer() as meet:
        cfg = {"name": "meet", "transport": "streamable-http", "url": meet.url, "timeout": {"connect": "700ms"}}
        reg: Registry = await registry_of(timings=replace(FAST, call_timeout=20), mcp_servers=[cfg])
        tool = reg.lookup("meet.echo")
        assert tool is not None
        assert (await reg.call(tool, {"text": "up"}, ctx)).status_code == 200
    # The server is gone and its port now takes no connection: the next call cannot open one.
    with never_connects(meet.port):
        started = time.monotonic()
        res = await reg.call(tool, {"text": "down"}, ctx)
        took = time.monotonic() - started
    assert (res.status_code, res.timed_out) == (504, True), res
    assert res.error.startswith("upstream connect timed out after 700ms"), res.error
    assert took < 10, took


def test_timeouts_are_validated_at_load(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    for entry, key, words in (
        ("{file: s.json, timeout: {read: soon}}", "openapi[0].timeout.read", "invalid duration"),
        ("{file: s.json, timeout: {connect: 0s}}", "openapi[0].timeout.connect", "must be > 0"),
        ("{file: s.json, timeout: {write: 1s}}", "openapi[0].timeout", "unknown field `write`"),
    ):
        config.write_text(f"openapi:\n  - {entry}\n")
        with pytest.raises(ConfigError) as caught:
            load_settings(config, env={})
        assert caught.value.key == key and words in caught.value.fault, caught.value
    config.write_text("mcp_servers:\n  - {name: m, url: 'http://x/mcp', transport: sse, timeout: {read: -1s}}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert caught.value.key == "mcp_servers[0].timeout.read"
    config.write_text("openapi:\n  - {file: s.json, timeout: {connect: 250ms, read: 2m}}\n")
    assert load_settings(config, env={}).openapi[0].timeout.seconds(5, 30) == (0.25, 120.0)
    config.write_text("openapi:\n  - {file: s.json}\n")
    assert load_settings(config, env={}).openapi[0].timeout.seconds(5, 30) == (5, 30)


@contextmanager
def stalls_mid_body(drip: bool) -> Iterator[int]:
    """Answers every request with its head and 10 of 100 promised bytes; then says nothing more (drip=False) or
    one more byte every 0.2 s, never reaching the end (drip=True)."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + b" " * 10)
        while drip and not stop.wait(0.2):
            try:
                conn.sendall(b" ")
            except OSError:
                return

    with _accepting(lambda conn, stop: threading.Thread(target=answer, args=(conn, stop), daemon=True).start()) as port:
        yield port


@pytest.mark.parametrize("drip", [False, True], ids=["stalls", "trickles"])
async def test_an_openapi_answer_that_stops_or_trickles_mid_body_times_out_within_connect_plus_read(
    registry_of: Any, ctx: CallContext, tmp_path: Path, drip: bool
) -> None:
    (tmp_path / "spec.json").write_text(json.dumps(_spec("halfAnswer")))
    with stalls_mid_body(drip) as port:
        cfg = {
            "file": str(tmp_path / "spec.json"),
            "backend_url": f"http://127.0.0.1:{port}",
            "timeout": {"connect": "500ms", "read": "1s"},
        }
        reg: Registry = await registry_of(openapi=[cfg])
        tool = reg.lookup("half_answer")
        assert tool is not None
        started = time.monotonic()
        res = await reg.call(tool, {}, ctx)
        took = time.monotonic() - started
    assert (res.status_code, res.timed_out) == (504, True), res
    assert res.error == "upstream timed out after 1s (GET /halfAnswer)"
    assert 0.9 <= took < 1.5 + 5, took  # within connect + read (and the machine's slack), not held for good
