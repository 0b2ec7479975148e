"""The `mesh` CLI (CONTRACT 1.1) as a user runs it: a separate process against a running server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gate.servers import Server, blocked_call, pending, write_config

pytestmark = pytest.mark.served


def mesh_cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MESH_URL": server.url, "USER": "tester"}
    env.pop("MESH_ADMIN_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "flux7.shared.cli.approvals", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[2],
    )


@pytest.fixture
def server(tmp_path: Path, engine_env: str) -> Iterator[Server]:
    """`flux7 serve` on this test's store (engine_env: its PostgreSQL database under --engine=postgresql)."""
    s = Server(write_config(tmp_path), workers=1).start()
    try:
        yield s
    finally:
        s.stop()


def test_pending_show_and_approve_resolve_as_cli_user(server: Server) -> None:
    assert mesh_cli(server, "pending").stdout.strip() == "No pending approvals."
    call = blocked_call(server.url, "from-cli")
    (approval,) = pending(server.url, 1)
    short = approval["id"][:8]
    listing = mesh_cli(server, "pending").stdout.splitlines()
    assert listing[0].split() == ["ID", "AGENT", "TOOL", "REMAINING", "RISK", "PARAMS"]
    assert listing[1].split()[:3] == [short, "bot", "echo.run"]
    shown = mesh_cli(server, "show", short).stdout
    assert f"id:           {approval['id']}" in shown and '"from-cli"' in shown
    done = mesh_cli(server, "approve", short, "--reason", "looks fine")
    assert done.returncode == 0 and done.stdout.strip() == f"{approval['id']} approved"
    assert call.result(timeout=20).status_code == 200
    detail = httpx.get(f"{server.url}/approvals/{approval['id']}").json()
    assert detail["resolved_by"] == "cli:tester" and detail["reasoning"] == "looks fine"
    again = mesh_cli(server, "deny", short)
    assert again.returncode == 1 and "approval already resolved (HTTP 409)" in again.stderr


def test_halt_halts_and_resume(server: Server) -> None:
    stopped = mesh_cli(server, "halt", "--agent", "bot", "--reason", "runaway loop")
    assert stopped.returncode == 0 and stopped.stdout.startswith("Stopped agent bot: halt ")
    assert (
        httpx.post(
            f"{server.url}/tool/echo.run", json={"args": ["x"]}, headers={"Authorization": "Bearer agent:bot"}
        ).status_code
        == 403
    )
    rows = mesh_cli(server, "halts").stdout.splitlines()
    assert rows[0].split() == ["ID", "SCOPE", "TARGET", "BY", "SINCE", "REASON"]
    halt_id = rows[1].split()[0]
    assert rows[1].split()[1:4] == ["agent", "bot", "cli:tester"]
    assert "already in force" in mesh_cli(server, "halt", "--agent", "bot").stdout
    resumed = mesh_cli(server, "resume", halt_id)
    assert resumed.returncode == 0 and resumed.stdout.startswith("Resumed halt ")
    assert mesh_cli(server, "halts").stdout.strip() == "No stop in force."


def test_watch_prints_each_new_approval_as_it_arrives(server: Server) -> None:
    env = {**os.environ, "MESH_URL": server.url, "USER": "tester"}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "flux7.shared.cli.approvals", "watch", "--interval", "0.1"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().startswith("Watching ")
        call = blocked_call(server.url, "watched")
        line = watcher.stdout.readline()
        assert " NEW " in line and "echo.run" in line and "watched" in line
        approval_id = line.split()[2]
        assert mesh_cli(server, "deny", approval_id).returncode == 0
        resolved = watcher.stdout.readline()
        assert resolved.split()[1:] == ["DENIED", approval_id, "by", "cli:tester"]
        assert call.result(timeout=20).status_code == 403
    finally:
        watcher.terminate()
        watcher.wait(10)


def test_an_unreachable_mesh_is_a_clear_error_and_exit_1(tmp_path: Path) -> None:
    dead = Server(write_config(tmp_path))  # never started: nothing listens on its port
    result = mesh_cli(dead, "pending")
    assert result.returncode == 1 and "cannot reach the mesh" in result.stderr
