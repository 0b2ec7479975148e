"""The official TypeScript MCP SDK client (@modelcontextprotocol/sdk, pinned in tests/mcp_ts/package-lock.json)
over Streamable HTTP against `/mcp` on a real daemon: it sees an MCP upstream's tools and results as the
upstream sent them, and the mesh's refusals as `isError` results.

The client runs under Node (tests/mcp_ts/client.mjs). Its packages come from the lockfile: `npm ci` in
tests/mcp_ts, which this module runs itself when node_modules is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_server.conftest import REPO, Daemon, run_daemon
from tests.mcp_server.test_passthrough import CALLS, upstream_itself, write

pytestmark = pytest.mark.served

TS = REPO / "tests" / "mcp_ts"


@pytest.fixture(scope="module")
def node() -> str:
    exe = shutil.which("node")
    npm = shutil.which("npm")
    assert exe and npm, "Node.js and npm are needed for the TypeScript SDK client test"
    if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TS, capture_output=True, text=True
        )
        assert done.returncode == 0, f"npm ci in {TS} failed:\n{done.stdout}\n{done.stderr}"
    return exe


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with run_daemon(write(tmp_path_factory.mktemp("ts-sdk")), tools=3 + 7 + 2) as d:
        yield d


def ts_client(node: str, daemon: Daemon, agent: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    done = subprocess.run(
        [node, str(TS / "client.mjs"), daemon.mcp_url, agent, json.dumps(calls)],
        cwd=TS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


async def test_typescript_sdk_sees_the_upstreams_tools_and_results_as_sent(node: str, daemon: Daemon) -> None:
    tools, results = await upstream_itself()
    seen = ts_client(node, daemon, "claude", [(f"rich.{n}", a) for n, a in CALLS.items()])
    assert seen["protocolVersion"] == "2025-11-25"
    listed = {t["name"]: t for t in seen["tools"]}
    for name, tool in tools.items():
        assert listed[f"rich.{name}"] == {**tool, "name": f"rich.{name}"}
    assert listed["rich.wipe"]["annotations"]["destructiveHint"] is True
    assert listed["rich.weather"]["outputSchema"]["required"] == ["city", "celsius", "conditions"]
    by_name = dict(zip(CALLS, seen["results"], strict=True))
    for name, result in by_name.items():  # resultType is the Python SDK model's default, not on the wire
        assert result == {k: v for k, v in results[name].items() if k != "resultType"}
    assert by_name["wipe"]["isError"] is True and by_name["weather"]["structuredContent"]["city"] == "Oslo"


async def test_typescript_sdk_sees_refusals_as_errors_and_protocol_faults_as_thrown(
    node: str, daemon: Daemon, tmp_path: Path
) -> None:
    calls = [
        ("echo.write_file", {"path": str(tmp_path / "no"), "content": "x"}),
        ("echo.fail", {}),
        ("say.run", {"args": ["hi"]}),
        ("echo.nope", {}),
    ]
    denied, failed, said, unknown = ts_client(node, daemon, "claude", calls)["results"]
    assert denied == {
        "content": [{"type": "text", "text": "Policy denied: policy=claude tool=echo.write_file action=deny"}],
        "isError": True,
    }
    assert failed == {
        "content": [{"type": "text", "text": "Backend error: MCP error -32042: the upstream refused"}],
        "isError": True,
    }
    assert said["structuredContent"] == {"stdout": "hi\n", "stderr": "", "exit_code": 0}
    assert unknown["thrown"]["code"] == -32602 and "Unknown tool: echo.nope" in unknown["thrown"]["message"]
    assert not (tmp_path / "no").exists()
