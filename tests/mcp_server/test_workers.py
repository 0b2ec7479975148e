"""MCP sessions live in SQLite: a session opened on one granian worker is valid on every other one."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.mcp_server.conftest import run_daemon, write_config

pytestmark = pytest.mark.served


def test_a_session_opened_on_one_worker_works_on_the_other(tmp_path: Path) -> None:
    with run_daemon(write_config(tmp_path, mcp=False), workers=2) as daemon:
        auth = {"Authorization": "Bearer agent:claude"}
        opened = httpx.post(
            daemon.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, headers=auth
        )
        session = opened.headers["mcp-session-id"]
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            # The tool's process reports its parent: the worker that served this request.
            "params": {"name": "ppid.run", "arguments": {"args": ["-c", "echo $PPID"]}},
        }
        workers: set[int] = set()
        for _ in range(200):  # a fresh connection each time, until both workers have answered
            with httpx.Client() as fresh:
                r = fresh.post(daemon.mcp_url, json=call, headers={**auth, "Mcp-Session-Id": session})
            assert r.status_code == 200, r.text
            result = json.loads(r.json()["result"]["content"][0]["text"])
            workers.add(int(result["stdout"]))
            if len(workers) == 2:
                break
    assert len(workers) == 2, "every request landed on one worker"
