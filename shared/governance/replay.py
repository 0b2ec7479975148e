"""Policy replay: re-decide the traced calls of the last N days with a proposed policy set, before it ships.

Each call is decided twice by the real engine, `PolicySet.decide` and the pipeline's floors (what
`Pipeline.evaluate` does live): with the set in force and with the proposed one. An agent the catalog refuses
is refused under any set, so its calls never change. Every call whose action would change is reported, grouped
by agent and tool. Calls are read in trace order and floors are looked up once per tool, so a replay is
deterministic and fast (bench/governance_replay_bench.py)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from flux7.shared.gate.policy import Decision, PolicySet, stricter
from flux7.shared.store.db import Database

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["ReplayCall", "iter_calls", "replay"]

_NS = 1_000_000_000
MAX_LISTED = 200  # individual changes listed (every one is counted in the groups)
IDS_PER_GROUP = 5


class ReplayCall(msgspec.Struct, kw_only=True):
    trace_id: str = ""
    session_id: str = ""
    agent_id: str = ""
    tool: str = ""
    params: Any = None
    policy: str = ""
    policy_rule: str = ""
    timestamp: str = ""


_decode = msgspec.json.Decoder(ReplayCall).decode


def iter_calls(db: Database, days: float, now: float | None = None, batch: int = 20000) -> Iterator[ReplayCall]:
    """The traced calls (newest revision of each) of the last `days`, oldest first; control-plane events and
    calls halted before any decision are left out."""
    since = int(((time.time() if now is None else now) - days * 86400) * _NS)
    last = 0
    while True:
        rows = db.query(
            "SELECT t.id, l.line FROM traces t JOIN trace_lines l ON l.seq = t.line_seq "
            "WHERE t.id > ? AND t.ts_ns >= ? AND t.tool NOT LIKE 'mesh.%' ORDER BY t.id LIMIT ?",
            (last, since, batch),
        )
        if not rows:
            return
        for _, raw in rows:
            call = _decode(raw if isinstance(raw, bytes) else bytes(raw) if not isinstance(raw, str) else raw.encode())
            if call.policy != "halted" and call.agent_id:
                yield call
        last = int(rows[-1][0])


def replay(
    mesh: Mesh, proposed: PolicySet, days: float, *, now: float | None = None, current: PolicySet | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    current = current if current is not None else mesh.policies.current
    pipeline = mesh.pipeline
    floors: dict[str, Decision | None] = {}
    lifecycle: dict[str, Decision | None] = {}  # the catalog's floor, before policy as live
    calls = 0
    transitions: dict[str, int] = defaultdict(int)
    groups: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    listed: list[dict[str, Any]] = []
    for call in iter_calls(mesh.db, days, now):
        calls += 1
        tool = call.tool
        if tool not in floors:
            floors[tool] = pipeline.decider.floor_for(mesh.registry.lookup(tool))
        floor = floors[tool]
        agent = call.agent_id
        if agent not in lifecycle:
            lifecycle[agent] = pipeline.decider.lifecycle_floor(agent)
        if lifecycle[agent] is not None:
            continue  # refused before any policy, whatever the set: it cannot change
        before = stricter(current.decide(call.agent_id, tool, call.params), floor)
        after = stricter(proposed.decide(call.agent_id, tool, call.params), floor)
        if before.action == after.action:
            continue
        key = (call.agent_id, tool, before.action, after.action)
        transitions[f"{before.action}->{after.action}"] += 1
        group = groups.get(key)
        if group is None:
            group = groups[key] = {
                "agent": call.agent_id,
                "tool": tool,
                "from": before.action,
                "to": after.action,
                "rule_before": before.rule,
                "rule_after": after.rule,
                "count": 0,
                "trace_ids": [],
            }
        group["count"] += 1
        if len(group["trace_ids"]) < IDS_PER_GROUP:
            group["trace_ids"].append(call.trace_id)
        if len(listed) < MAX_LISTED:
            listed.append(
                {
                    "trace_id": call.trace_id,
                    "agent": call.agent_id,
                    "tool": tool,
                    "timestamp": call.timestamp,
                    "recorded": call.policy,
                    "from": before.action,
                    "to": after.action,
                    "rule_before": before.rule,
                    "rule_after": after.rule,
                }
            )
    ordered = sorted(groups.values(), key=lambda g: (_rank(g["from"], g["to"]), g["agent"], g["tool"]))
    return {
        "days": days,
        "calls": calls,
        "changed": sum(transitions.values()),
        "transitions": dict(sorted(transitions.items())),
        "groups": ordered,
        "changes": listed,
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def _rank(before: str, after: str) -> int:
    """Narrowing first (what breaks), then widening (what a security review reads)."""
    order = {"allow": 0, "human_approval": 1, "deny": 2}
    return 0 if order[after] > order[before] else 1
