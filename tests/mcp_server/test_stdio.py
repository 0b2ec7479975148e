"""`mesh7 --mcp` as a real process with the official SDK's stdio client: standalone (with the HTTP API beside it),
relaying to a daemon of the same config, and refusing a daemon of another config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from flux7.shared.store.db import Database
from tests.mcp_server.conftest import MESH7, REPO, approval_id_in, healthy, run_daemon, wait_until, write_config
from tests.support.http import free_port

pytestmark = pytest.mark.served


def mesh7_args(config: Path, port: int, *extra: str) -> list[str]:
    return ["-c", MESH7, "--mcp", "--config", str(config), "--port", str(port), *extra]


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "MESH_AGENT_TOKEN"}
    return {**base, "PYTHONPATH": str(REPO), **extra}


@asynccontextmanager
async def stdio_client(config: Path, port: int, mode: str, **extra_env: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=mesh7_args(config, port), env=env(**extra_env), cwd=str(config.parent)
    )
    async with Client(params, mode=mode, read_timeout_seconds=60) as client:
        yield client


def text_of(result: object) -> str:
    return str(result.content[0].text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_standalone_stdio_governs_calls_and_serves_approvals_over_http(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path)
    port = free_port()
    target = tmp_path / "note.txt"
    target.write_text("from stdio")
    async with stdio_client(config, port, mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        names = {t.name for t in (await client.list_tools()).tools}  # answered once the upstreams are connected
        wait_until(lambda: healthy(f"http://127.0.0.1:{port}"), what="the HTTP API beside stdio")
        assert {"echo.echo", "say.run", "grant.list", "mesh.catalog"} <= names

        assert text_of(await client.call_tool("echo.echo", {"text": "over stdio"})) == "over stdio"
        denied = await client.call_tool("echo.write_file", {"path": str(tmp_path / "no"), "content": "x"})
        assert text_of(denied) == "Policy denied: policy=claude tool=echo.write_file action=deny"
        assert denied.is_error is True
        approval = approval_id_in(text_of(await client.call_tool("echo.read_file", {"path": str(target)})))
        # The HTTP API runs beside stdio in the same process, so the approval can be resolved while we wait.
        approved = httpx.post(f"http://127.0.0.1:{port}/approvals/{approval}/approve", json={"resolved_by": "ann"})
        assert approved.status_code == 200
        assert text_of(await client.call_tool("echo.read_file", {"path": str(target)})) == "from stdio"
        with pytest.raises(MCPError) as err:
            await client.call_tool("echo.nope", {})
        assert (err.value.error.code, err.value.error.message) == (-32602, "Unknown tool: echo.nope")


def test_stdio_answers_a_parse_error_and_writes_only_json_to_stdout(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False)
    lines = [
        "this is not json",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    ]
    proc = subprocess.run(
        [sys.executable, *mesh7_args(config, free_port(), "--mcp-session-id", "fixed-session")],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    answers = {json.loads(line)["id"]: json.loads(line) for line in out[1:]}
    assert answers[1]["result"]["protocolVersion"] == "2024-11-05"
    assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert len(out) == 3  # nothing but answers on stdout: logs went to stderr


async def test_stdio_relays_to_a_daemon_of_the_same_config(tmp_path: Path, store: Database) -> None:
    config = write_config(tmp_path, mcp=False)
    with run_daemon(config) as daemon:
        async with stdio_client(config, daemon.port, "legacy") as client:
            assert "exit_code" in text_of(await client.call_tool("say.run", {"args": ["relayed"]}))
            assert [tuple(r) for r in store.query("SELECT agent_id FROM mcp_sessions")] == [("claude",)]
        # EOF on stdin: the relay ended its session with DELETE /mcp.
        wait_until(lambda: store.query_one("SELECT count(*) FROM mcp_sessions")[0] == 0, what="DELETE /mcp")
        traces = httpx.get(f"{daemon.url}/traces", params={"tool": "say.run"}).json()
        assert traces[0]["agent_id"] == "claude" and traces[0]["policy"] == "allow"


async def test_relay_sends_mesh_agent_token_as_the_bearer(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False)
    with run_daemon(config) as daemon:
        async with stdio_client(config, daemon.port, "auto", MESH_AGENT_TOKEN="agent:boss") as client:
            names = {t.name for t in (await client.list_tools()).tools}
    assert "approval.resolve" in names  # only supervisor agents (boss) see it


def test_stdio_refuses_a_daemon_that_serves_another_config(tmp_path: Path) -> None:
    served = write_config(tmp_path, mcp=False)
    other = write_config(tmp_path, mcp=False, name="other.yaml")
    with run_daemon(served) as daemon:
        proc = subprocess.run(
            [sys.executable, *mesh7_args(other, daemon.port)],
            input="",
            capture_output=True,
            text=True,
            env=env(),
            cwd=tmp_path,
            timeout=60,
        )
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert f"a mesh daemon on port {daemon.port} serves another config" in proc.stderr
    assert "refusing to relay" in proc.stderr
