"""/metrics from a real `flux7 serve --workers 2`: what Prometheus receives after real calls on every outcome,
parsed by prometheus_client, its Content-Type by a strict media-type parser, HEAD answered, and pending
approvals that expire without anyone sweeping them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flux7.shared.store.db import Database
from tests.support.mediatype import MediaTypeError, parse_media_type
from tests.support.mesh import pets_mesh_config
from tests.support.server import running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["list_pets", "get_*"]
    action: allow
  - tools: ["delete_pet"]
    action: deny
  - tools: ["create_pet"]
    action: human_approval
"""
BURST = """
name: burst
agent: burst
rate_limit: {max_per_minute: 2}
rules:
  - tools: ["list_pets"]
    action: allow
"""
APPROVAL_SECONDS = 10  # long enough to see it pending on a loaded machine
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def bearer(agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer agent:{agent}"}


def post(url: str, path: str, agent: str, body: Any, **headers: str) -> httpx.Response:
    # a fresh connection per request, so requests spread over both workers
    return httpx.post(url + path, json=body, headers={**bearer(agent), **headers}, timeout=30, trust_env=False)


def scrape(url: str) -> httpx.Response:
    r = httpx.get(f"{url}/metrics", timeout=30, trust_env=False)
    assert r.status_code == 200, r.text
    return r


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def series(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in found.items() if n == name}


def red(tool: str, agent: str, outcome: str) -> tuple[tuple[str, str], ...]:
    return (("agent", agent), ("outcome", outcome), ("tool", tool))


def test_the_strict_parser_refuses_what_prometheus_refuses() -> None:
    assert parse_media_type("text/plain; version=0.0.4; charset=utf-8") == (
        "text/plain",
        {"version": "0.0.4", "charset": "utf-8"},
    )
    for bad in ("text/plain; version=0.0.4; charset=utf-8; charset=utf-8", "text/plain; charset", "text/ plain"):
        with pytest.raises(MediaTypeError):
            parse_media_type(bad)


def mcp_call(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call over /mcp (handshake era), as agent claude."""
    accept = {"Accept": "application/json, text/event-stream"}
    init = post(
        url,
        "/mcp",
        "claude",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        **accept,
    )
    assert init.status_code == 200, init.text
    session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18", **accept}
    post(url, "/mcp", "claude", {"jsonrpc": "2.0", "method": "notifications/initialized"}, **session)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    r = post(url, "/mcp", "claude", call, **session)
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.served
def test_two_workers_serve_red_upstream_and_approval_metrics(
    tmp_path: Path, backend: Backend, store: Database, engine_configs: str
) -> None:
    config = pets_mesh_config(tmp_path, backend, POLICY, approval_timeout=APPROVAL_SECONDS, admin_token=None)
    (tmp_path / "policies" / "burst.yaml").write_text(BURST)
    with running_server(config, workers=2) as server:
        url = server.url
        first = scrape(url)
        # one Content-Type, exactly the 0.0.4 text format, and it parses strictly
        assert first.headers.get_list("content-type") == ["text/plain; version=0.0.4; charset=utf-8"]
        assert parse_media_type(first.headers["content-type"]) == (
            "text/plain",
            {"version": "0.0.4", "charset": "utf-8"},
        )
        head = httpx.head(f"{url}/metrics", timeout=30, trust_env=False)
        assert head.status_code == 200 and head.content == b""
        assert head.headers.get_list("content-type") == first.headers.get_list("content-type")
        before = samples(first.text)
        assert before[("flux7_build_info", (("version", "0.1.0"),))] == 1
        assert series(before, "agent_mesh_upstream_up") == {(("source", "openapi"), ("upstream", "spec.json")): 1}

        # an upstream error: the backend answers 500, so the upstream counts as down until it answers again
        assert post(url, "/tool/get_boom", "claude", {}).status_code == 502
        # the worker that made the call writes its series within metrics.FLUSH_SECONDS; the other one may answer
        down = {(("source", "openapi"), ("upstream", "spec.json")): 0}
        wait_until(lambda: series(samples(scrape(url).text), "agent_mesh_upstream_up") == down, what="the gauge at 0")
        for i in range(6):
            assert post(url, "/tool/list_pets", "claude", {"params": {"limit": i}}).status_code == 200
        assert post(url, "/tool/delete_pet", "claude", {"petId": "1"}).status_code == 403
        assert [post(url, "/tool/list_pets", "burst", {}).status_code for _ in range(3)] == [200, 200, 429]
        halt = httpx.post(f"{url}/halts", json={"scope": "agent", "target": "stopped", "reason": "t"}, trust_env=False)
        assert halt.status_code == 201
        attempts: list[int] = []

        def halted() -> bool:
            attempts.append(post(url, "/tool/list_pets", "stopped", {}).status_code)
            return attempts[-1] == 403

        # a worker sees a new stop within halts.CACHE_SECONDS: calls before that went through, and count so
        wait_until(halted, what="the stop on the worker that answers")
        through = len(attempts) - 1
        assert attempts[:-1] == [200] * through
        assert post(url, "/decide", "claude", {"tool": "list_pets", "arguments": {}}).status_code == 200
        # a blocking REST approval counts when it is resolved, with its wait, in the resolution's commit
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(post, url, "/tool/create_pet", "claude", {"name": "Rex"})
            queued = wait_until(
                lambda: httpx.get(f"{url}/approvals", params={"status": "pending"}, trust_env=False).json(),
                what="the REST call's approval",
            )
            approve = httpx.post(
                f"{url}/approvals/{queued[0]['id']}/approve", json={"resolved_by": "ann"}, trust_env=False
            )
            assert approve.status_code == 200
            done = waiting.result(60)
        assert done.status_code == 200 and done.json()["policy"] == "human_approval"
        # MCP without a supervisor does not block: the approval stays pending until it expires
        pending = mcp_call(url, "create_pet", {"name": "Kit"})
        assert "approval" in str(pending["result"]).lower()

        expected = {
            red("get_boom", "claude", "error"): 1,
            red("list_pets", "claude", "allow"): 7,  # six REST calls and one /decide
            red("delete_pet", "claude", "deny"): 1,
            red("list_pets", "burst", "allow"): 2,
            red("list_pets", "burst", "rate_limited"): 1,
            red("list_pets", "stopped", "halted"): 1,
            **({red("list_pets", "stopped", "allow"): through} if through else {}),
            red("create_pet", "claude", "approval"): 2,  # the approved REST call and the pending MCP one
        }
        scraped: list[Samples] = []

        def settled() -> bool:
            # Both workers' series written (each within metrics.FLUSH_SECONDS of its last call): a worker writes
            # all it holds at once, so once the last calls' series show, every earlier one does too.
            scraped[:] = [samples(scrape(url).text)]
            return series(scraped[0], "agent_mesh_tool_calls_total") == expected

        wait_until(settled, what="every call's series")
        found = scraped[0]
        calls = series(found, "agent_mesh_calls_total")
        # by policy action: the failed get_boom was allowed
        assert calls[(("action", "allow"),)] == 10 + through and calls[(("action", "human_approval"),)] == 2
        assert calls[(("action", "rate_limited"),)] == 1 and calls[(("action", "halted"),)] == 1
        assert series(found, "agent_mesh_upstream_errors_total") == {
            (("source", "openapi"), ("upstream", "spec.json")): 1
        }
        assert series(found, "agent_mesh_upstream_up") == {(("source", "openapi"), ("upstream", "spec.json")): 1}
        assert found[("agent_mesh_upstream_latency_seconds_count", ())] == 10 + through
        durations = series(found, "agent_mesh_request_duration_seconds_count")
        assert durations == {
            (("transport", "rest"),): 13 + through,
            (("transport", "decide"),): 1,
            (("transport", "mcp"),): 1,
            (("transport", "stdio"),): 0,
        }
        red_count = series(found, "agent_mesh_tool_call_duration_seconds_count")
        assert red_count[red("list_pets", "claude", "allow")] == 7

        # pending approvals: the same answer from every worker, and an expired one is not pending
        def pending_everywhere(expected: float) -> Callable[[], bool]:
            return lambda: all(
                samples(scrape(url).text)[("agent_mesh_approvals_pending", ())] == expected for _ in range(6)
            )

        assert pending_everywhere(1)(), "the pending approval, before it expires"
        wait_until(pending_everywhere(0), timeout=APPROVAL_SECONDS + 30, what="the expired approval to leave the gauge")
        status = [tuple(r) for r in store.query("SELECT status FROM approvals WHERE resolved_by = ''")]
        assert status == [("pending",)]  # nobody swept it: the gauge reads expiry, not a sweep
