"""Rate limits and loop detection (CONTRACT 1.4, DESIGN decision 3), counted in SQLite across workers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.mesh import Mesh
from flux7.shared.settings import Policy, RateLimit, ToolLimit, parse_policy
from flux7.shared.store.db import Database
from tests.mcp_server.inproc import META, MODERN, Rpc
from tests.support.waiting import eventually

from .servers import AGENT, Server, blocked_call, pending, write_config

LIMITED = Policy(name="limited", rate_limit=RateLimit(max_per_minute=5))
BUDGET = Policy(name="budget", rate_limit=RateLimit(max_total=2))
PLAIN = Policy(name="plain")


def test_per_minute_limit_blocks_the_call_after_the_maximum_with_the_contract_text(mesh: Mesh) -> None:
    for i in range(5):
        assert mesh.limits.check("a", LIMITED, "t", {"i": i}) is None
        mesh.limits.record("a", LIMITED, "t", {"i": i})
    assert mesh.limits.check("a", LIMITED, "t", {"i": 99}) == 'rate_limit: agent "a" exceeded 5 calls/min'
    assert mesh.limits.check("b", LIMITED, "t", {"i": 99}) is None  # the state is per agent


def test_total_budget_is_checked_before_the_minute_window(mesh: Mesh) -> None:
    both = Policy(name="both", rate_limit=RateLimit(max_per_minute=2, max_total=2))
    for i in range(2):
        mesh.limits.record("a", both, "t", {"i": i})
    assert mesh.limits.check("a", both, "t", {}) == 'rate_limit: agent "a" exceeded total budget (2 calls)'


def test_only_recorded_calls_count_so_denied_ones_never_use_the_budget(mesh: Mesh) -> None:
    for _ in range(10):
        assert mesh.limits.check("a", BUDGET, "t", {}) is None  # checks alone record nothing
    mesh.limits.record("a", BUDGET, "t", {})
    assert mesh.limits.check("a", BUDGET, "t", {}) is None


def test_same_tool_and_params_three_times_in_ten_seconds_is_a_loop(mesh: Mesh) -> None:
    args = {"path": "/x", "n": 1}
    for _ in range(3):
        assert mesh.limits.check("a", LIMITED, "fs.read", args) is None
        mesh.limits.record("a", LIMITED, "fs.read", args)
    assert mesh.limits.check("a", LIMITED, "fs.read", {"n": 1, "path": "/x"}) == (
        'loop_detected: agent "a" called fs.read with same params 3 times in 10s'
    )
    assert mesh.limits.check("a", LIMITED, "fs.read", {"path": "/y", "n": 1}) is None
    assert mesh.limits.check("a", LIMITED, "fs.list", args) is None


def test_without_rate_limit_nothing_is_checked_or_recorded_including_loops(mesh: Mesh) -> None:
    for _ in range(5):
        mesh.limits.record("a", PLAIN, "t", {})
        assert mesh.limits.check("a", PLAIN, "t", {}) is None
    assert mesh.limits.check("a", None, "t", {}) is None
    assert mesh.db.query_one("SELECT COUNT(*) FROM rate_events")[0] == 0


def test_top_level_loop_detection_applies_without_a_rate_limit(mesh_of: Callable[..., Mesh]) -> None:
    mesh = mesh_of(loop_detection={"enabled": True, "threshold": 2, "window_seconds": 30})
    for _ in range(2):
        assert mesh.limits.check("a", None, "t", [1, 2]) is None
        mesh.limits.record("a", None, "t", [1, 2])
    assert mesh.limits.check("a", PLAIN, "t", [1, 2]) == (
        'loop_detected: agent "a" called t with same params 2 times in 30s'
    )


def test_counts_are_shared_by_every_worker_on_the_database(mesh_of: Callable[..., Mesh]) -> None:
    one, two = mesh_of(), mesh_of()
    for i in range(5):
        (one if i % 2 else two).limits.record("a", LIMITED, "t", {"i": i})
    assert one.limits.check("a", LIMITED, "t", {}) == 'rate_limit: agent "a" exceeded 5 calls/min'
    assert two.limits.check("a", LIMITED, "t", {}) == 'rate_limit: agent "a" exceeded 5 calls/min'


def test_loop_detection_looks_back_over_the_last_fifty_calls_only(mesh: Mesh) -> None:
    many = Policy(name="many", rate_limit=RateLimit(max_per_minute=1000))
    for _ in range(3):
        mesh.limits.record("a", many, "t", {"same": True})
    for i in range(50):
        mesh.limits.record("a", many, "t", {"i": i})
    assert mesh.limits.check("a", many, "t", {"same": True}) is None


ECHOES = Policy(
    name="echoes",
    rate_limit=RateLimit(max_per_minute=100),
    tool_limits=(ToolLimit(tools=("echo.*",), max_per_minute=2), ToolLimit(tools=("echo.loud",), max_total=1)),
)


def test_a_tool_limit_counts_each_matching_tool_apart_beside_the_agents_budget(mesh: Mesh) -> None:
    for i in range(2):
        assert mesh.limits.check("a", ECHOES, "echo.run", {"i": i}) is None
        mesh.limits.record("a", ECHOES, "echo.run", {"i": i})
    assert mesh.limits.check("a", ECHOES, "echo.run", {"i": 9}) == (
        'rate_limit: agent "a" exceeded 2 calls/min on tool "echo.run"'
    )
    assert mesh.limits.check("a", ECHOES, "echo.soft", {}) is None  # another tool the glob matches: its own count
    assert mesh.limits.check("a", ECHOES, "say.run", {}) is None  # no tool limit: the agent's budget alone
    assert mesh.limits.check("b", ECHOES, "echo.run", {}) is None  # and per agent


def test_every_matching_tool_limit_applies_and_the_total_comes_first(mesh: Mesh) -> None:
    mesh.limits.record("a", ECHOES, "echo.loud", {})
    assert mesh.limits.check("a", ECHOES, "echo.loud", {"x": 1}) == (
        'rate_limit: agent "a" exceeded total budget (1 calls) on tool "echo.loud"'
    )
    mesh.limits.reset("a")
    assert mesh.limits.check("a", ECHOES, "echo.loud", {"x": 1}) is None


def test_tool_limits_are_validated_with_the_policy() -> None:
    for bad, fault in (
        ("tool_limits: [{tools: [], max_total: 1}]", "at least one tool glob"),
        ("tool_limits: [{tools: ['a'], max_total: -1}]", "0 (no limit) or more"),
        ("tool_limits: [{tools: ['a']}]", "set max_per_minute, max_total or both"),
    ):
        with pytest.raises(ConfigError, match=re.escape(fault)):
            parse_policy(f"name: p\n{bad}\nrules: [{{tools: ['*'], action: allow}}]\n", "p.yaml")


GATED_AND_LIMITED = {
    "name": "gate",
    "agent": "*",
    "tool_limits": [{"tools": ["echo.run"], "max_per_minute": 5}],
    "rules": [{"tools": ["echo.run"], "action": "human_approval"}, {"tools": ["*"], "action": "allow"}],
}


@pytest.mark.served
def test_approved_calls_released_at_once_on_two_workers_stay_within_the_limit(
    tmp_path: Path, servers: list[Server], database_url: str
) -> None:
    """16 calls queued within the limit (none counted yet), all approved at once: as they are released, each is
    checked and counted in one transaction, so 5 run and 11 get the 429 any call over the limit gets."""
    queued, budget = 16, 5
    server = Server(write_config(tmp_path, policies=[GATED_AND_LIMITED]), workers=2).start()
    servers.append(server)
    calls = [blocked_call(server.url, f"q{i}") for i in range(queued)]  # distinct args: no loop
    listed = pending(server.url, queued)
    start = threading.Barrier(queued)

    def approve(approval_id: str) -> int:
        start.wait(20)
        return httpx.post(f"{server.url}/approvals/{approval_id}/approve", timeout=30).status_code

    with concurrent.futures.ThreadPoolExecutor(queued) as pool:
        assert list(pool.map(approve, [a["id"] for a in listed])) == [200] * queued
    answers = [c.result(timeout=60) for c in calls]
    ran = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert len(ran) == budget, sorted(r.status_code for r in answers)
    assert all(r.json()["result"]["stdout"].startswith("q") for r in ran)
    limit_text = f'rate_limit: agent "bot" exceeded {budget} calls/min on tool "echo.run"'
    for r in refused:
        body = r.json()
        assert (r.status_code, body["policy"], body["error"]) == (429, "rate_limited", limit_text), body
    # each refusal is traced as one, with the approval that released it; the count is the calls that ran
    trace = httpx.get(f"{server.url}/traces", params={"trace": refused[0].json()["trace_id"]}, timeout=10).json()[0]
    assert (trace["policy"], trace["status_code"], trace["approval_status"]) == ("rate_limited", 429, "approved")
    db = Database(database_url or tmp_path / "flux7.db")
    try:
        assert [tuple(r) for r in db.query("SELECT count(*) FROM rate_events WHERE tool = 'echo.run'")] == [(budget,)]
    finally:
        db.close()
    again = blocked_call(server.url, "late")  # over the limit before it is queued: refused at once
    assert again.result(timeout=30).status_code == 429


ONE_A_MINUTE = {**GATED_AND_LIMITED, "tool_limits": [{"tools": ["echo.run"], "max_per_minute": 1}]}
ECHO = [{"name": "echo", "bin": "/bin/echo", "bare": {}}]
BOT = {"Authorization": "Bearer agent:bot"}


async def test_decide_with_wait_approved_over_the_limit_is_refused_as_any_call_over_it(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    mesh = mesh_of(cli_tools=ECHO, policies=[ONE_A_MINUTE])
    c = await client_of(mesh)

    async def decide(arg: str) -> httpx.Response:
        body = {"tool": "echo.run", "arguments": {"args": [arg]}, "wait": True}
        return await c.post("/decide", json=body, headers=BOT)

    held = [asyncio.create_task(decide(arg)) for arg in ("one", "two")]
    queued = await eventually(lambda: len(mesh.approvals.query("pending")) == 2 and mesh.approvals.query("pending"))
    for approval in queued:
        mesh.approvals.resolve(approval.id, "approve", resolved_by="ann", resolver="")
    answers = sorted([await asyncio.wait_for(t, 30) for t in held], key=lambda r: r.status_code)
    assert [(r.status_code, r.json()["action"]) for r in answers] == [(200, "allow"), (429, "deny")]
    limit_text = 'rate_limit: agent "bot" exceeded 1 calls/min on tool "echo.run"'
    assert answers[1].json()["reason"] == limit_text
    trace = (await c.get("/traces", params={"trace": answers[1].json()["trace_id"]})).json()[0]
    assert (trace["policy"], trace["status_code"], trace["approval_status"]) == ("rate_limited", 429, "approved")


async def test_an_mcp_claim_over_the_limit_is_refused_and_its_approval_kept_for_later(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    mesh = mesh_of(
        cli_tools=ECHO,
        policies=[ONE_A_MINUTE],
        approval={"timeout_seconds": 60, "wait_seconds": 0, "channel": "queue"},
    )
    rpc = await Rpc(await client_of(mesh), agent="bot").open()
    for arg in ("one", "two"):
        assert "Approval required" in await rpc.text("echo.run", {"args": [arg]})
    for approval in mesh.approvals.query("pending"):
        mesh.approvals.resolve(approval.id, "approve", resolved_by="ann", resolver="")
    assert json.loads(await rpc.text("echo.run", {"args": ["one"]}))["stdout"] == "one\n"  # the claim runs it
    refused = await rpc.call("echo.run", {"args": ["two"]})
    limit_text = 'rate_limit: agent "bot" exceeded 1 calls/min on tool "echo.run"'
    assert refused.get("isError") is True and limit_text in str(refused), refused
    # nothing was used up: once the operator resets the count, the same approval lets the call through
    mesh.limits.reset("bot")
    assert json.loads(await rpc.text("echo.run", {"args": ["two"]}))["stdout"] == "two\n"


def _mcp_call(url: str, arg: str) -> str:
    """One stateless MCP tools/call of echo.run (any worker answers it): the text of its result."""
    params = {"name": "echo.run", "arguments": {"args": [arg]}, "_meta": META}
    headers = {**BOT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo.run"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    r = httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return str(r.json()["result"]["content"][0]["text"])


@pytest.mark.served
def test_approved_mcp_calls_claimed_at_once_on_two_workers_stay_within_the_limit(
    tmp_path: Path, servers: list[Server], database_url: str
) -> None:
    """12 MCP calls approved, then claimed at the same time on two workers: each claim checks and counts in the
    transaction that uses up its approval, so 3 run and 9 are refused with their approvals left unused."""
    calls, budget = 12, 3
    policy = {**GATED_AND_LIMITED, "tool_limits": [{"tools": ["echo.run"], "max_per_minute": budget}]}
    approval = {"timeout_seconds": 120, "wait_seconds": 0, "channel": "queue"}
    server = Server(write_config(tmp_path, policies=[policy], approval=approval), workers=2).start()
    servers.append(server)
    args = [f"m{i}" for i in range(calls)]
    for arg in args:
        assert "Approval required" in _mcp_call(server.url, arg)
    for a in pending(server.url, calls):
        assert httpx.post(f"{server.url}/approvals/{a['id']}/approve", timeout=30).status_code == 200
    start = threading.Barrier(calls)

    def claim(arg: str) -> str:
        start.wait(20)
        return _mcp_call(server.url, arg)

    with concurrent.futures.ThreadPoolExecutor(calls) as pool:
        texts = list(pool.map(claim, args))
    ran = [t for t in texts if '"stdout"' in t]
    limit_text = f'rate_limit: agent "bot" exceeded {budget} calls/min on tool "echo.run"'
    assert len(ran) == budget, texts
    assert all(limit_text in t for t in texts if t not in ran), texts
    db = Database(database_url or tmp_path / "flux7.db")
    try:
        used = db.query("SELECT count(*) FROM approvals WHERE status = 'approved' AND used_at IS NOT NULL")
    finally:
        db.close()
    assert [tuple(r) for r in used] == [(budget,)]  # the refused claims used nothing up


LIMITED_ALLOWED = {
    "name": "limited-allowed",
    "agent": "*",
    "tool_limits": [{"tools": ["echo.run"], "max_per_minute": 5}],
    "rules": [{"tools": ["*"], "action": "allow"}],
}


@pytest.mark.served
def test_allowed_calls_sent_at_once_on_two_workers_stay_within_the_limit(
    tmp_path: Path, servers: list[Server], database_url: str
) -> None:
    """32 allowed calls at once over two workers against 5 a minute: each call is checked and counted in one write
    transaction, so exactly 5 run; checked on a reader and counted later with the trace, calls in flight on the
    two workers all saw room and went through."""
    callers, budget = 32, 5
    server = Server(write_config(tmp_path, policies=[LIMITED_ALLOWED]), workers=2).start()
    servers.append(server)
    start = threading.Barrier(callers)

    def call(i: int) -> httpx.Response:
        start.wait(20)
        return httpx.post(f"{server.url}/tool/echo.run", json={"args": [f"a{i}"]}, headers=AGENT, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(callers) as pool:
        answers = list(pool.map(call, range(callers)))
    assert sorted(r.status_code for r in answers) == [200] * budget + [429] * (callers - budget)
    limit_text = f'rate_limit: agent "bot" exceeded {budget} calls/min on tool "echo.run"'
    assert {r.json()["error"] for r in answers if r.status_code == 429} == {limit_text}
    db = Database(database_url or tmp_path / "flux7.db")
    try:
        assert [tuple(r) for r in db.query("SELECT count(*) FROM rate_events WHERE tool = 'echo.run'")] == [(budget,)]
    finally:
        db.close()
