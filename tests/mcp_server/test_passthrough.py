"""An MCP upstream's tools and results reach MCP clients as the upstream sent them (DESIGN decision 8), and what
the mesh refuses is an `isError` result with CONTRACT 1.14's words.

The upstream is a real SDK server process (tests/upstreams/servers/mcp_rich.py). What a client sees of it
directly is the yardstick: the official SDK client (default and legacy modes) must see the same through `/mcp`
on a daemon and through `mesh7 --mcp` over stdio."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.mcp_server.conftest import REPO, Daemon, approval_id_in, healthy, run_daemon
from tests.mcp_server.test_stdio import env as stdio_env
from tests.mcp_server.test_stdio import mesh7_args
from tests.support.http import free_port
from tests.support.waiting import wait_until
from tests.upstreams.servers import mcp_rich

pytestmark = pytest.mark.served

RICH = REPO / "tests" / "upstreams" / "servers" / "mcp_rich.py"
ECHO = REPO / "tests" / "upstreams" / "servers" / "mcp_echo.py"
CALLS: dict[str, dict[str, Any]] = {"weather": {"city": "Oslo"}, "wipe": {"target": "/srv"}, "plain": {"text": "x"}}
MODES = ["auto", "legacy"]


def config_text(tmp: Path, extra: str = "") -> str:
    return f"""
storage_path: {tmp}/flux7.db
approval: {{timeout_seconds: 60, channel: queue}}
memory: {{enabled: false}}
supervisor: {{auto_approve: false}}
auth: {{open_loopback: true}}  # the test resolves approvals as a loopback operator
mcp_servers:
  - {{name: rich, transport: stdio, command: {sys.executable}, args: ['{RICH}']}}
  - {{name: echo, transport: stdio, command: {sys.executable}, args: ['{ECHO}']}}
cli_tools:
  - {{name: say, bin: /bin/echo, bare: {{timeout: 5s}}}}
  - {{name: nope, bin: /bin/false, bare: {{timeout: 5s}}}}
policies:
  - name: claude
    agent: claude
    rules:
      - {{tools: ["rich.*", "echo.fail", "say.run", "nope.run"], action: allow}}
      - {{tools: ["echo.write_file"], action: deny}}
      - {{tools: ["echo.read_file"], action: human_approval}}
  - name: limited
    agent: "limited-*"
    rate_limit: {{max_per_minute: 1}}
    rules: [{{tools: ["say.run"], action: allow}}]
{extra}"""


def write(tmp: Path, extra: str = "") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "config.yaml"
    cfg.write_text(config_text(tmp, extra))
    return cfg


def dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True))


_direct: dict[str, Any] = {}


async def upstream_itself() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The upstream's tools and call results as the SDK client sees them with nothing in between."""
    if not _direct:
        params = StdioServerParameters(command=sys.executable, args=[str(RICH)])
        async with Client(params, mode="legacy") as client:
            _direct["tools"] = {t.name: dump(t) for t in (await client.list_tools()).tools}
            _direct["results"] = {name: dump(await client.call_tool(name, args)) for name, args in CALLS.items()}
    return _direct["tools"], _direct["results"]


async def assert_passes_through(client: Client) -> None:
    tools, results = await upstream_itself()
    assert tools["weather"]["outputSchema"]["title"] == "Weather" and tools["wipe"]["_meta"] == mcp_rich.TOOL_META
    listed = {t.name: dump(t) for t in (await client.list_tools()).tools}
    for name, tool in tools.items():
        assert listed[f"rich.{name}"] == {**tool, "name": f"rich.{name}"}
    hints = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    assert listed["rich.wipe"]["annotations"] == hints
    assert listed["rich.weather"]["title"] == "Current weather"
    assert listed["rich.weather"]["annotations"]["readOnlyHint"] is True
    for name, args in CALLS.items():
        assert dump(await client.call_tool(f"rich.{name}", args)) == results[name]
    assert results["weather"]["structuredContent"]["celsius"] == 21.5 and results["weather"]["_meta"]
    assert results["wipe"]["isError"] is True


async def assert_refusals_are_errors(client: Client, url: str, tmp: Path) -> None:
    """What the mesh refuses, holds or fails at: `isError: true` with the contract's text."""
    denied = await client.call_tool("echo.write_file", {"path": str(tmp / "no"), "content": "x"})
    assert (denied.is_error, text(denied)) == (True, "Policy denied: policy=claude tool=echo.write_file action=deny")
    failed = await client.call_tool("echo.fail", {})
    assert (failed.is_error, text(failed)) == (True, "Backend error: MCP error -32042: the upstream refused")
    exited = await client.call_tool("nope.run", {})
    assert (exited.is_error, text(exited)) == (True, "Backend error: exit status 1")
    said = await client.call_tool("say.run", {"args": ["hi"]})
    assert said.is_error is False and said.structured_content == {"stdout": "hi\n", "stderr": "", "exit_code": 0}
    pending = await client.call_tool("echo.read_file", {"path": str(tmp / "held")})
    approval = approval_id_in(text(pending))
    assert pending.is_error is True  # the call did not run (and echo.read_file declares an output schema)
    assert httpx.post(f"{url}/approvals/{approval}/deny", json={"resolved_by": "bob"}).status_code == 200
    refused = await client.call_tool("echo.read_file", {"path": str(tmp / "held")})
    assert refused.is_error is True
    assert text(refused) == f"Approval denied by bob for echo.read_file (id: {approval[:8]}): do not retry this call."
    halt = httpx.post(f"{url}/halts", json={"scope": "agent", "target": "claude", "reason": "incident", "by": "ops"})
    assert halt.status_code == 201
    halt_id = halt.json()["halt"]["id"]
    try:
        stopped = await client.call_tool("rich.weather", {"city": "Oslo"})
    finally:
        assert httpx.post(f"{url}/halts/{halt_id}/resume", json={"by": "ops"}).status_code == 200
    assert stopped.is_error is True
    assert text(stopped) == f"halted: emergency stop {halt_id[:8]} in force for agent claude: incident"


def text(result: Any) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return str(result.content[0].text)


# -- /mcp on a daemon ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with run_daemon(write(tmp_path_factory.mktemp("passthrough")), tools=3 + 7 + 2) as d:
        yield d


@asynccontextmanager
async def over_http(daemon: Daemon, agent: str, mode: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer agent:{agent}"}, timeout=30)
    async with http, Client(streamable_http_client(daemon.mcp_url, http_client=http), mode=mode) as client:
        yield client


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_http_sees_the_upstreams_tools_and_results_as_sent(daemon: Daemon, mode: str) -> None:
    async with over_http(daemon, "claude", mode) as client:
        await assert_passes_through(client)


@pytest.mark.parametrize("mode", MODES)
async def test_refusals_over_http_are_error_results_with_the_contract_text(
    daemon: Daemon, mode: str, tmp_path: Path
) -> None:
    async with over_http(daemon, "claude", mode) as client:
        await assert_refusals_are_errors(client, daemon.url, tmp_path)
    async with over_http(daemon, f"limited-{mode}", mode) as client:
        first = await client.call_tool("say.run", {"args": [mode]})
        second = await client.call_tool("say.run", {"args": [mode, "again"]})
    assert first.is_error is False
    assert second.is_error is True
    assert text(second) == f'Rate limited: rate_limit: agent "limited-{mode}" exceeded 1 calls/min'


# -- mesh7 --mcp over stdio ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_stdio_sees_the_same_and_refusals_as_errors(tmp_path: Path, mode: str) -> None:
    config = write(tmp_path / "stdio")
    port = free_port()
    params = StdioServerParameters(
        command=sys.executable, args=mesh7_args(config, port), env=stdio_env(), cwd=str(config.parent)
    )
    async with Client(params, mode=mode, read_timeout_seconds=60) as client:
        await assert_passes_through(client)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: healthy(url), what="the HTTP API beside stdio")
        await assert_refusals_are_errors(client, url, tmp_path)
