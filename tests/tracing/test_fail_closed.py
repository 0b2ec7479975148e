"""The audit trail fails closed, on a real `flux7 serve` (granian) process: a call's trace is durable before its
upstream is called, a store another process has locked refuses calls (503, no upstream call), and a kill -9
mid-call leaves a row that verify and GET /traces show as outcome unknown."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.http import wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.server import REPO, Server, start_server, stop_server
from tests.upstreams.servers.http_backend import Backend, running_backend

pytestmark = pytest.mark.served

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}
BUSY_BOUND_S = 15.0  # busy_timeout is 5 s: a refusal well within this bound is a bounded wait, not a hang
AT_ONCE_S = 2.5  # once a write has waited out the lock, the next ones are refused without waiting again

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["list_pets", "hang"]
    action: allow
  - tools: ["delete_pet"]
    action: deny
  - tools: ["create_pet"]
    action: human_approval
"""


@pytest.fixture
def backend() -> Iterator[Backend]:
    with running_backend() as b:
        yield b


def _config(tmp_path: Path, backend: Backend) -> Path:
    config = pets_mesh_config(tmp_path, backend, POLICY, approval_timeout=5, trace_file=True)
    spec = backend.spec()
    spec["paths"]["/hang"] = {"get": {"operationId": "hang", "summary": "Answers when the test lets it"}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return config


@contextmanager
def serving(config: Path) -> Iterator[Server]:
    server = start_server(config)
    try:
        yield server
    finally:
        stop_server(server)


@contextmanager
def locked(db: Path) -> Iterator[None]:
    """A second, plain python sqlite3 process holding the database's write lock (BEGIN EXCLUSIVE)."""
    script = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "c.execute('ROLLBACK')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(10)


def _hits(backend: Backend, path: str) -> int:
    return sum(1 for r in backend.requests if r.path == path)


def _timed_post(url: str, **kw: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = httpx.post(url, timeout=60, trust_env=False, **kw)
    return r, time.monotonic() - started


def _verify(server: Server) -> dict[str, Any]:
    report: dict[str, Any] = httpx.get(f"{server.url}/traces/verify", headers=ADMIN, trust_env=False).json()
    return report


def _mcp_session(server: Server) -> str:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    r = httpx.post(f"{server.url}/mcp", json=init, headers=AGENT, trust_env=False)
    assert r.status_code == 200, r.text
    return r.headers["mcp-session-id"]


def test_a_locked_store_refuses_every_call_and_the_upstream_is_never_reached(tmp_path: Path, backend: Backend) -> None:
    with serving(_config(tmp_path, backend)) as server:
        tool = f"{server.url}/tool"
        assert httpx.post(f"{tool}/list_pets", json={}, headers=AGENT, trust_env=False).status_code == 200
        assert _hits(backend, "/pets") == 1
        sid = _mcp_session(server)
        total_before = httpx.get(f"{server.url}/health", trust_env=False).json()["traces"]["total"]

        with locked(tmp_path / "flux7.db"):
            allowed, took = _timed_post(f"{tool}/list_pets", json={}, headers=AGENT)
            assert allowed.status_code == 503, allowed.text
            assert took < BUSY_BOUND_S
            body = allowed.json()
            assert body["policy"] == "error" and "unavailable" in body["error"] and body["trace_id"] == ""
            assert allowed.headers["retry-after"] == "1"
            assert _hits(backend, "/pets") == 1  # the upstream was not called

            denied, took = _timed_post(f"{tool}/delete_pet", json={"petId": "1"}, headers=AGENT)
            assert denied.status_code == 503 and took < AT_ONCE_S, (denied.text, took)

            approval, took = _timed_post(f"{tool}/create_pet", json={"name": "Rex"}, headers=AGENT)
            assert approval.status_code == 503 and took < AT_ONCE_S, (approval.text, took)
            assert "unavailable" in approval.json()["error"]

            decided, _ = _timed_post(f"{server.url}/decide", json={"tool": "list_pets"}, headers=AGENT)
            assert decided.status_code == 503 and "unavailable" in decided.json()["error"], decided.text

            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_pets"}}
            mcp, _ = _timed_post(f"{server.url}/mcp", json=call, headers={**AGENT, "Mcp-Session-Id": sid})
            reply = mcp.json()
            assert "result" not in reply, reply
            assert reply["error"]["code"] == -32603 and "unavailable" in reply["error"]["message"]
            assert _hits(backend, "/pets") == 1

        # Released: nothing refused was stored, calls go through again and the chain holds.
        health = httpx.get(f"{server.url}/health", trust_env=False).json()
        assert health["traces"]["total"] == total_before
        again = httpx.post(f"{tool}/list_pets", json={}, headers=AGENT, trust_env=False)
        assert again.status_code == 200 and _hits(backend, "/pets") == 2
        denied_now = httpx.post(f"{tool}/delete_pet", json={"petId": "1"}, headers=AGENT, trust_env=False)
        assert denied_now.status_code == 403
        traces = httpx.get(f"{server.url}/traces", headers=ADMIN, trust_env=False).json()
        by_id = {t["trace_id"]: t for t in traces}
        assert by_id[again.json()["trace_id"]]["status_code"] == 200
        assert by_id[denied_now.json()["trace_id"]]["policy"] == "deny"
        report = _verify(server)
        assert "break" not in report and "outcome_unknown" not in report, report
        assert report["last_seq"] >= 4


def test_a_kill_9_during_the_upstream_call_leaves_an_outcome_unknown_row(tmp_path: Path, backend: Backend) -> None:
    config = _config(tmp_path, backend)
    server = start_server(config)
    try:
        done = httpx.post(f"{server.url}/tool/list_pets", json={}, headers=AGENT, trust_env=False)
        assert done.status_code == 200
        errors: list[BaseException] = []

        def call_hang() -> None:
            try:
                httpx.post(f"{server.url}/tool/hang", json={}, headers=AGENT, timeout=60, trust_env=False)
            except httpx.HTTPError as e:
                errors.append(e)

        caller = threading.Thread(target=call_hang)
        caller.start()
        wait_until(lambda: _hits(backend, "/hang") == 1, 20, "the call to reach the upstream")
        server.kill9()
        caller.join(20)
        assert errors, "the in-flight call must have been cut off by the kill"
    finally:
        stop_server(server)
    backend.hold.set()

    with serving(config) as server:
        hung = httpx.get(f"{server.url}/traces?tool=hang", headers=ADMIN, trust_env=False).json()
        assert len(hung) == 1 and hung[0]["status_code"] == 0 and hung[0]["policy"] == "allow"
        report = _verify(server)
        assert "break" not in report, report
        assert report["outcome_unknown"] == 1
        assert report["outcome_unknown_calls"][0]["trace_id"] == hung[0]["trace_id"]
        assert report["outcome_unknown_calls"][0]["tool"] == "hang"

        cli = subprocess.run(
            [sys.executable, "-m", "flux7.functions.entry", "trace", "verify", str(tmp_path / "traces.jsonl")],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        unknown = [line for line in cli.stdout.splitlines() if line.startswith("OUTCOME UNKNOWN")]
        assert len(unknown) == 1 and hung[0]["trace_id"] in unknown[0] and " hang " in unknown[0]

        # The done call's outcome is there, and new calls complete and keep the chain whole.
        after = httpx.post(f"{server.url}/tool/list_pets", json={}, headers=AGENT, trust_env=False)
        assert after.status_code == 200
        listed = httpx.get(f"{server.url}/traces?tool=list_pets", headers=ADMIN, trust_env=False).json()
        assert sorted(t["status_code"] for t in listed) == [200, 200]
        assert all(t["revision"] == 1 for t in listed)
        final = _verify(server)
        assert "break" not in final and final["outcome_unknown"] == 1


async def test_stdio_answers_a_locked_store_with_a_json_rpc_error_and_recovers(tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.shared.exceptions import MCPError

    from tests.mcp_server.conftest import write_config
    from tests.mcp_server.test_stdio import env, mesh7_args
    from tests.support.http import free_port

    config = write_config(tmp_path)
    params = StdioServerParameters(
        command=sys.executable, args=mesh7_args(config, free_port()), env=env(), cwd=str(config.parent)
    )
    async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
        assert "echo.echo" in {t.name for t in (await client.list_tools()).tools}
        first = await client.call_tool("echo.echo", {"text": "before"})
        assert not first.is_error
        with locked(tmp_path / "flux7.db"):
            with pytest.raises(MCPError) as err:
                await client.call_tool("echo.echo", {"text": "while locked"})
            assert err.value.error.code == -32603
            assert "unavailable" in err.value.error.message
        after = await client.call_tool("echo.echo", {"text": "after"})
        assert not after.is_error and "after" in after.content[0].text  # type: ignore[union-attr]
