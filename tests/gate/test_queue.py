"""The approval queue's core (CONTRACT 1.8, 1.14): ids, prefixes, resolution, waiting, timeouts, the claim flow,
settings overrides. A second Mesh on the same file stands for another worker: it shares nothing but the database."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from flux7.shared.errors import Conflict, NotFound
from flux7.shared.gate.approvals import Approval
from flux7.shared.mesh import Mesh
from tests.support.http import wait_until
from tests.support.waiting import eventually


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    await eventually(predicate, timeout)


def submit(mesh: Mesh, agent: str = "bot", tool: str = "fs.write", args: Any = None, **kw: Any) -> Approval:
    return mesh.approvals.submit(
        agent=agent,
        tool=tool,
        arguments={"path": "/tmp/x"} if args is None else args,
        trace_id=kw.pop("trace_id", "ab" * 16),
        policy_rule=kw.pop("policy_rule", "gate"),
        policy_version=kw.pop("policy_version", mesh.policies.current.version),
        **kw,
    )


def test_submitted_approval_has_a_16_hex_id_and_a_pending_view(mesh: Mesh) -> None:
    a = submit(mesh, args={"path": "/x", "content": "secret"})
    assert len(a.id) == 16 and int(a.id, 16) >= 0
    view = msgspec.to_builtins(a.view(expose_content=True))
    assert list(view) == [
        "id",
        "agent_id",
        "tool",
        "params",
        "trace_id",
        "policy_rule",
        "status",
        "created_at",
        "remaining",
    ]
    assert view["status"] == "pending" and view["remaining"] in ("4m59s", "5m0s")
    assert view["created_at"].endswith("Z")
    assert a.view(expose_content=False).params["content"]["content_length"] == 6


def test_lookup_takes_a_unique_prefix_and_refuses_an_ambiguous_one(mesh: Mesh) -> None:
    ids = [submit(mesh).id for _ in range(40)]
    target = ids[0]
    assert mesh.approvals.get(target[:10]).id == target
    assert mesh.approvals.get(target.upper()).id == target
    first_chars = [i[0] for i in ids]
    shared = next(c for c in first_chars if first_chars.count(c) > 1)  # 40 ids over 16 first digits
    with pytest.raises(NotFound):
        mesh.approvals.get(shared)
    with pytest.raises(NotFound):
        mesh.approvals.get("not-hex")


def test_resolve_records_resolver_reasoning_and_confidence_and_a_second_resolve_conflicts(mesh: Mesh) -> None:
    a = submit(mesh)
    done = mesh.approvals.resolve(
        a.id[:8], "approve", resolver="", resolved_by="supervisor:sup", reasoning="safe", confidence=0.93
    )
    assert (done.status, done.resolved_by, done.reasoning, done.confidence) == (
        "approved",
        "supervisor:sup",
        "safe",
        0.93,
    )
    view = msgspec.to_builtins(done.view())
    assert "remaining" not in view and view["resolved_at"].endswith("Z")
    with pytest.raises(Conflict, match="approval already resolved"):
        mesh.approvals.resolve(a.id, "deny", resolver="", resolved_by="human")


def test_listeners_hear_every_resolution_and_a_failing_listener_does_not_fail_it(mesh: Mesh) -> None:
    heard: list[tuple[str, str]] = []

    def broken(_: Approval) -> None:
        raise RuntimeError("listener bug")

    mesh.approvals.add_listener(broken)
    mesh.approvals.add_listener(lambda a: heard.append((a.id, a.status)))
    a = submit(mesh)
    assert mesh.approvals.resolve(a.id, "deny", resolver="", resolved_by="h").status == "denied"
    assert heard == [(a.id, "denied")]


async def test_a_waiter_is_released_by_a_resolution_in_the_same_worker(mesh: Mesh) -> None:
    a = submit(mesh)
    waiter = asyncio.create_task(mesh.approvals.wait(a.id, 30))
    await until(lambda: mesh.approvals.waiting() == 1)
    mesh.approvals.resolve(a.id, "approve", resolver="", resolved_by="h")
    done = await asyncio.wait_for(waiter, 5)
    assert done.status == "approved"


async def test_a_waiter_is_released_by_a_resolution_made_by_another_worker(mesh_of: Callable[..., Mesh]) -> None:
    one, two = mesh_of(), mesh_of()
    a = submit(one)
    waiter = asyncio.create_task(one.approvals.wait(a.id, 30))
    await until(lambda: one.approvals.waiting() == 1)
    started = time.perf_counter()
    # Another worker resolves from its own thread and connection: only the database is shared.
    await asyncio.to_thread(two.approvals.resolve, a.id, "deny", resolved_by="other", resolver="")
    done = await asyncio.wait_for(waiter, 5)
    assert done.status == "denied" and done.resolved_by == "other"
    assert time.perf_counter() - started < 1.0


async def test_a_wait_that_runs_out_resolves_the_approval_as_system_timeout(mesh: Mesh) -> None:
    heard: list[str] = []
    mesh.approvals.add_listener(lambda a: heard.append(a.status))
    a = submit(mesh)
    done = await mesh.approvals.wait(a.id, 0.05)
    assert (done.status, done.resolved_by) == ("timeout", "system:timeout")
    assert heard == ["timeout"]
    with pytest.raises(Conflict):
        mesh.approvals.resolve(a.id, "approve", resolver="", resolved_by="late")


async def test_a_brief_wait_leaves_the_approval_pending(mesh: Mesh) -> None:
    a = submit(mesh)
    assert await mesh.approvals.wait_briefly(a.id, 0.05) is None
    assert mesh.approvals.get(a.id).status == "pending"


def test_an_overdue_approval_nobody_waits_on_times_out_on_the_next_access(mesh_of: Callable[..., Mesh]) -> None:
    one = mesh_of(approval={"timeout_seconds": 0.05})
    a = submit(one)
    wait_until(lambda: time.time() > a.expires_ts, timeout=5)
    other = mesh_of(approval={"timeout_seconds": 0.05})
    listed = other.approvals.query(status="all")
    assert [(x.id, x.status, x.resolved_by) for x in listed] == [(a.id, "timeout", "system:timeout")]
    assert other.approvals.query(status="pending") == []


def test_pending_approvals_survive_a_restart_with_their_expiry(mesh_of: Callable[..., Mesh]) -> None:
    first = mesh_of()
    a = submit(first, args={"x": 1})
    first.db.close()
    again = mesh_of()
    found = again.approvals.get(a.id)
    assert (found.status, found.params, found.expires_ts) == ("pending", {"x": 1}, a.expires_ts)
    assert again.approvals.resolve(a.id, "approve", resolver="", resolved_by="h").status == "approved"


def _race_resolve(workers: list[Mesh], approval_id: str) -> list[str]:
    results: list[str] = []
    barrier = threading.Barrier(len(workers))

    def race(m: Mesh, decision: str) -> None:
        barrier.wait()
        try:
            results.append(m.approvals.resolve(approval_id, decision, resolver="", resolved_by=decision).status)
        except Conflict:
            results.append("conflict")

    threads = [threading.Thread(target=race, args=(m, ("approve", "deny")[i % 2])) for i, m in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_two_concurrent_resolves_of_one_approval_have_exactly_one_winner(mesh_of: Callable[..., Mesh]) -> None:
    workers = [mesh_of() for _ in range(4)]
    for _ in range(10):
        a = submit(workers[0])
        results = _race_resolve(workers, a.id)
        assert results.count("conflict") == len(workers) - 1
        winner = next(r for r in results if r != "conflict")
        assert workers[0].approvals.get(a.id).status == winner


async def test_five_hundred_blocked_waits_are_all_released_with_their_own_outcome(
    mesh_of: Callable[..., Mesh],
) -> None:
    one, two = mesh_of(), mesh_of()
    approvals = [submit(one, args={"i": i}) for i in range(500)]
    waiters = [asyncio.create_task(one.approvals.wait(a.id, 60)) for a in approvals]
    await until(lambda: one.approvals.waiting() == 500)

    def resolve_all() -> None:
        for i, a in enumerate(approvals):
            # half through this worker, half through the other one
            (one if i % 2 else two).approvals.resolve(
                a.id, "approve" if i % 3 else "deny", resolver="", resolved_by=f"r{i}"
            )

    await asyncio.to_thread(resolve_all)
    done = await asyncio.wait_for(asyncio.gather(*waiters), 20)
    for i, (a, d) in enumerate(zip(approvals, done, strict=True)):
        assert d.id == a.id
        assert d.status == ("approved" if i % 3 else "denied")
        assert d.resolved_by == f"r{i}"


def test_an_approval_is_claimed_once_for_the_same_arguments_and_policy_version(mesh: Mesh) -> None:
    version = mesh.policies.current.version
    a = submit(mesh, args={"b": 2, "a": 1})
    assert mesh.approvals.claim_approved("bot", "fs.write", {"a": 1, "b": 2}) is None  # still pending
    assert mesh.approvals.find_pending("bot", "fs.write", {"a": 1, "b": 2}).id == a.id
    mesh.approvals.resolve(a.id, "approve", resolver="", resolved_by="h")
    assert mesh.approvals.claim_approved("bot", "fs.write", {"a": 1, "b": 3}) is None
    assert mesh.approvals.claim_approved("other", "fs.write", {"a": 1, "b": 2}) is None
    assert mesh.approvals.claim_approved("bot", "fs.write", {"a": 1, "b": 2}, policy_version=version + "x") is None
    claimed = mesh.approvals.claim_approved("bot", "fs.write", {"a": 1, "b": 2})
    assert claimed is not None and claimed.id == a.id and claimed.used_at
    assert mesh.approvals.claim_approved("bot", "fs.write", {"a": 1, "b": 2}) is None


def test_a_claim_race_between_workers_uses_the_approval_exactly_once(mesh_of: Callable[..., Mesh]) -> None:
    workers = [mesh_of() for _ in range(4)]
    a = submit(workers[0], args={"k": "v"})
    workers[0].approvals.resolve(a.id, "approve", resolver="", resolved_by="h")
    claims: list[Approval | None] = []
    barrier = threading.Barrier(len(workers))

    def claim(m: Mesh) -> None:
        barrier.wait()
        claims.append(m.approvals.claim_approved("bot", "fs.write", {"k": "v"}))

    threads = [threading.Thread(target=claim, args=(m,)) for m in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sum(c is not None for c in claims) == 1


def test_a_denied_call_is_found_until_it_expires_and_a_pending_one_is_not_duplicated(mesh: Mesh) -> None:
    a = submit(mesh, args={"rm": "-rf"})
    assert mesh.approvals.find_denied("bot", "fs.write", {"rm": "-rf"}) is None
    mesh.approvals.resolve(a.id, "deny", resolver="", resolved_by="human")
    found = mesh.approvals.find_denied("bot", "fs.write", {"rm": "-rf"})
    assert found is not None and found.resolved_by == "human"
    assert mesh.approvals.find_pending("bot", "fs.write", {"rm": "-rf"}) is None


def test_settings_overrides_are_validated_stored_and_seen_by_every_worker(mesh_of: Callable[..., Mesh]) -> None:
    one, two = mesh_of(), mesh_of()
    assert one.approvals.effective_settings().timeout_seconds == 300
    assert one.approvals.settings_store.update({"timeout_seconds": 30, "min_approvals": 3}, by="ops") == [
        "timeout_seconds"
    ]
    assert two.approvals.effective_settings().timeout_seconds == 30
    a = submit(two)
    assert 29 < a.expires_ts - a.created_ts <= 30
    from flux7.shared.errors import BadRequest

    with pytest.raises(BadRequest):
        two.approvals.settings_store.update({"timeout_seconds": -1}, by="ops")
    with pytest.raises(BadRequest):
        two.approvals.settings_store.update({"colour": "red"}, by="ops")
    with pytest.raises(BadRequest):
        two.approvals.settings_store.update({"auto_approve": "yes"}, by="ops")
    assert one.approvals.effective_settings().timeout_seconds == 30
