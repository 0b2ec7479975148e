"""Grants (CONTRACT 1.9) and the emergency stop (1.10), on the core components."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
import pytest

from flux7.shared.errors import BadRequest, NotFound
from flux7.shared.gate.grants import MCP_MAX_SECONDS
from flux7.shared.gate.halts import CACHE_SECONDS
from flux7.shared.mesh import Mesh
from tests.support.http import wait_until


def test_a_grant_covers_calls_matching_its_agent_and_tools_globs(mesh: Mesh) -> None:
    g = mesh.grants.create("bot-*", "fs.*", 60, granted_by="http:127.0.0.1:1")
    assert mesh.grants.find("bot-1", "fs.write").id == g.id
    assert mesh.grants.find("bot-1", "net.get") is None
    assert mesh.grants.find("other", "fs.write") is None
    assert mesh.grants.find("bot-1", "fs.dir/sub") is None  # `*` does not cross `/`
    view = msgspec.to_builtins(g.view())
    assert list(view) == ["id", "agent", "tools", "expires_at", "remaining", "granted_by"]
    assert view["remaining"] in ("59s", "1m0s")


def test_an_expired_grant_covers_nothing(mesh: Mesh) -> None:
    g = mesh.grants.create("bot", "fs.*", 0.05, granted_by="h")
    wait_until(lambda: time.time() > g.expires_ts, timeout=5)
    assert mesh.grants.find("bot", "fs.write") is None
    assert mesh.grants.active() == []


def test_grants_made_over_mcp_last_at_most_a_day(mesh: Mesh) -> None:
    g = mesh.grants.create(
        "bot", "*", 7 * 86400, granted_by="supervisor:sup", approval_id="a1", trace_id="t1", max_seconds=MCP_MAX_SECONDS
    )
    assert g.expires_ts - g.created_ts == pytest.approx(MCP_MAX_SECONDS, abs=1)
    assert (g.view().approval_id, g.view().trace_id) == ("a1", "t1")
    h = mesh.grants.create("bot", "*", 7 * 86400, granted_by="owner:admin-token")
    assert h.expires_ts - h.created_ts == pytest.approx(7 * 86400, abs=1)


def test_a_grant_needs_agent_tools_and_a_duration(mesh: Mesh) -> None:
    with pytest.raises(BadRequest, match="agent, tools, and duration are required"):
        mesh.grants.create("", "fs.*", 60, granted_by="h")


def test_revoking_needs_a_unique_prefix_of_at_least_four_characters(mesh: Mesh) -> None:
    g = mesh.grants.create("bot", "fs.*", 60, granted_by="h")
    with pytest.raises(NotFound, match="grant not found"):
        mesh.grants.revoke(g.id[:3], by="h")
    assert mesh.grants.revoke(g.id[:4], by="h").id == g.id
    assert mesh.grants.find("bot", "fs.write") is None
    with pytest.raises(NotFound):
        mesh.grants.revoke(g.id, by="h")


def test_a_stop_blocks_what_it_covers_only(mesh: Mesh) -> None:
    agent_stop = mesh.halts.create("agent", "bot-*", "leaking", "ops").halt
    assert mesh.halts.active_for("bot-1", "").id == agent_stop.id
    assert "leaking" in agent_stop.message
    assert mesh.halts.active_for("alice", "") is None
    session_stop = mesh.halts.create("session", "s-42", "", "ops").halt
    assert mesh.halts.active_for("alice", "s-42").id == session_stop.id
    assert mesh.halts.active_for("alice", "s-43") is None
    assert mesh.halts.active_for("alice", "") is None
    everyone = mesh.halts.create("all", "ignored", "", "ops").halt
    assert everyone.target == ""
    assert mesh.halts.active_for("alice", "").id == everyone.id


def test_a_stop_needs_a_known_scope_and_a_target(mesh: Mesh) -> None:
    with pytest.raises(BadRequest):
        mesh.halts.create("planet", "x", "", "ops")
    with pytest.raises(BadRequest, match="target is required"):
        mesh.halts.create("agent", " ", "", "ops")


def test_an_identical_stop_in_force_is_reported_not_duplicated(mesh: Mesh) -> None:
    first = mesh.halts.create("agent", "bot", "", "ops")
    second = mesh.halts.create("agent", "bot", "again", "ops")
    assert not first.already_active and second.already_active
    assert second.halt.id == first.halt.id
    assert len(mesh.halts.active()) == 1


def test_an_agent_stop_revokes_its_grants_and_denies_its_pending_approvals(mesh: Mesh) -> None:
    mine = mesh.grants.create("bot-1", "fs.*", 600, granted_by="h")
    theirs = mesh.grants.create("alice", "fs.*", 600, granted_by="h")
    version = mesh.policies.current.version
    pending = [
        mesh.approvals.submit(
            agent=a, tool="fs.write", arguments={}, trace_id="", policy_rule="p", policy_version=version
        )
        for a in ("bot-1", "bot-2", "alice")
    ]
    result = mesh.halts.create("agent", "bot-*", "incident", "ops")
    assert (result.revoked_grants, result.denied_approvals) == (1, 2)
    assert [g.id for g in mesh.grants.active()] == [theirs.id]
    statuses = {a.agent_id: mesh.approvals.get(a.id) for a in pending}
    assert statuses["bot-1"].status == "denied" and statuses["bot-1"].resolved_by == f"halt:{result.halt.id}"
    assert statuses["bot-2"].status == "denied"
    assert statuses["alice"].status == "pending"
    assert result.halt.revoked_grants == [mine.id]


def test_resume_restores_the_unexpired_grants_the_stop_revoked(mesh: Mesh) -> None:
    lasting = mesh.grants.create("bot", "fs.*", 600, granted_by="h")
    brief = mesh.grants.create("bot", "net.*", 0.2, granted_by="h")
    stop = mesh.halts.create("all", "", "", "ops").halt
    assert mesh.grants.active() == []
    wait_until(lambda: time.time() > brief.expires_ts, timeout=5)
    resumed = mesh.halts.resume(stop.id[:6], "ops")
    assert resumed.restored_grants == 1 and not resumed.halt.active
    assert [g.id for g in mesh.grants.active()] == [lasting.id]
    assert mesh.halts.active_for("bot", "") is None
    with pytest.raises(NotFound, match="halt not found"):
        mesh.halts.resume("ffffffffffffffff", "ops")


def test_a_grant_covered_by_two_stops_comes_back_after_the_last_resume(mesh: Mesh) -> None:
    g = mesh.grants.create("bot", "fs.*", 600, granted_by="h")
    first = mesh.halts.create("agent", "bot", "", "ops").halt
    second = mesh.halts.create("all", "", "", "ops").halt
    assert mesh.halts.resume(first.id, "ops").restored_grants == 0
    assert mesh.grants.active() == []
    assert mesh.halts.resume(second.id, "ops").restored_grants == 1
    assert [x.id for x in mesh.grants.active()] == [g.id]


def test_another_worker_sees_a_stop_and_its_end_within_the_cache_time(mesh_of: Callable[..., Mesh]) -> None:
    one, two = mesh_of(), mesh_of()
    assert two.halts.active_for("bot", "") is None  # primes two's cache
    stop = one.halts.create("agent", "bot", "", "ops").halt
    started = time.monotonic()
    wait_until(lambda: two.halts.active_for("bot", "") is not None, timeout=5)
    assert time.monotonic() - started <= CACHE_SECONDS + 0.2
    one.halts.resume(stop.id, "ops")
    wait_until(lambda: two.halts.active_for("bot", "") is None, timeout=5)


def test_stops_and_grants_survive_a_restart(mesh_of: Callable[..., Mesh]) -> None:
    first = mesh_of()
    g = first.grants.create("bot", "fs.*", 600, granted_by="h")
    stop = first.halts.create("session", "s1", "", "ops").halt
    first.db.close()
    again = mesh_of()
    assert again.grants.find("bot", "fs.read").id == g.id
    assert again.halts.active_for("x", "s1").id == stop.id
