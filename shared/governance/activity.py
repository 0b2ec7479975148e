"""What each agent did, folded in from the trace incrementally: every chained line after the cursor is read
once and counted into (agent, tool, day) rows, with the trace ids behind each counted event kept as evidence.
A read of scores never scans the trace; it folds in only the lines written since the last fold."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import msgspec

from flux7.shared.gate.guard import injection_risk
from flux7.shared.store.db import Database
from flux7.shared.tracing.entry import parse_timestamp

__all__ = ["EVENTS", "Activity"]

DAY_NS = 86_400 * 1_000_000_000
# the counted kinds, in the order of governance_activity's columns (after `calls`)
EVENTS = (
    "denials",
    "approvals_refused",
    "approvals_timed_out",
    "rate_limited",
    "loops",
    "injection",
    "upstream_errors",
)


class _Line(msgspec.Struct, kw_only=True):
    trace_id: str = ""
    agent_id: str = ""
    tool: str = ""
    params: Any = None
    policy: str = ""
    policy_rule: str = ""
    status_code: int = 0
    error: str = ""
    timestamp: str = ""
    approval_status: str = ""
    revision: int = 0


_decode = msgspec.json.Decoder(_Line).decode


def events_of(line: _Line) -> list[str]:
    """The counted events one trace line adds. Revision 0 is the call itself; later revisions add only what
    they settle (an approval refused or timed out, an upstream error), so no event is counted twice."""
    out: list[str] = []
    if line.revision == 0:
        out.append("calls")
        if line.policy == "deny" and not line.policy_rule.startswith("lifecycle:"):
            out.append("denials")
        elif line.policy == "rate_limited":
            out.append("loops" if line.error.startswith("loop_detected") else "rate_limited")
        if injection_risk(line.params):
            out.append("injection")
    final = line.status_code not in (0, 202)
    if final and line.policy == "human_approval" and line.approval_status in ("denied", "timeout"):
        out.append("approvals_refused" if line.approval_status == "denied" else "approvals_timed_out")
    elif (
        final
        and line.revision > 0
        and line.error
        and line.policy in ("allow", "human_approval")
        and line.approval_status not in ("denied", "timeout")
    ):
        out.append("upstream_errors")
    return out


class Activity:
    BATCH = 5000

    def __init__(self, db: Database) -> None:
        self._db = db

    def cursor(self) -> int:
        row = self._db.query_one("SELECT line_seq FROM governance_cursor WHERE id = 1")
        return int(row[0]) if row is not None else 0

    def fold(self) -> int:
        """Fold every trace line written since the cursor into the counts; the number of lines folded."""
        total = 0
        while True:
            start = self.cursor()
            rows = self._db.query(
                "SELECT seq, line FROM trace_lines WHERE seq > ? ORDER BY seq LIMIT ?", (start, self.BATCH)
            )
            if not rows:
                return total
            counts: dict[tuple[str, str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
            evidence: list[tuple[str, str, str, str, int]] = []
            for _, raw in rows:
                try:
                    line = _decode(bytes(raw) if not isinstance(raw, str) else raw.encode())
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if not line.agent_id or line.tool.startswith("mesh."):
                    continue  # control-plane events are not an agent's behaviour
                ns = parse_timestamp(line.timestamp) or time.time_ns()
                key = (line.agent_id, line.tool, ns // DAY_NS)
                for event in events_of(line):
                    counts[key][event] += 1
                    if event != "calls":
                        evidence.append((line.agent_id, event, line.trace_id, line.tool, ns))
                counts[key]["last_ns"] = max(counts[key]["last_ns"], ns)
            last = int(rows[-1][0])
            with self._db.write() as conn:
                moved = conn.execute("SELECT line_seq FROM governance_cursor WHERE id = 1").fetchone()
                if moved is not None and int(moved[0]) != start:
                    continue  # another worker folded these lines first
                columns = ("calls", *EVENTS)
                for (agent, tool, day), c in counts.items():
                    values = [int(c.get(k, 0)) for k in columns]
                    conn.execute(
                        f"INSERT INTO governance_activity (agent_id, tool, day, {', '.join(columns)}, last_ns) "
                        f"VALUES (?, ?, ?, {', '.join('?' for _ in columns)}, ?) "
                        f"ON CONFLICT (agent_id, tool, day) DO UPDATE SET "
                        + ", ".join(f"{k} = governance_activity.{k} + excluded.{k}" for k in columns)
                        + f", last_ns = {self._db.greatest('governance_activity.last_ns', 'excluded.last_ns')}",
                        (agent, tool, day, *values, int(c.get("last_ns", 0))),
                    )
                conn.executemany(
                    "INSERT INTO governance_evidence (agent_id, kind, trace_id, tool, ts_ns) VALUES (?, ?, ?, ?, ?)",
                    evidence,
                )
                conn.execute("UPDATE governance_cursor SET line_seq = ? WHERE id = 1", (last,))
            total += len(rows)

    def window(self, days: int, now: float | None = None) -> dict[str, dict[str, dict[str, int]]]:
        """agent -> tool -> counts (and last_ns) over the last `days` UTC days."""
        today = int((now if now is not None else time.time()) * 1e9) // DAY_NS
        columns = ("calls", *EVENTS)
        rows = self._db.query(
            f"SELECT agent_id, tool, {', '.join(f'sum({k}) AS {k}' for k in columns)}, max(last_ns) AS last_ns "
            "FROM governance_activity WHERE day > ? GROUP BY agent_id, tool",
            (today - days,),
        )
        out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
        for r in rows:
            out[str(r["agent_id"])][str(r["tool"])] = {k: int(r[k]) for k in (*columns, "last_ns")}
        return out

    def agents(self) -> list[str]:
        """Every agent with folded activity (kept for the longest window anything reads)."""
        return [str(r[0]) for r in self._db.query("SELECT DISTINCT agent_id FROM governance_activity ORDER BY 1")]

    def evidence(self, agent: str, kind: str, since_ns: int, limit: int = 5) -> list[str]:
        rows = self._db.query(
            "SELECT trace_id FROM governance_evidence WHERE agent_id = ? AND kind = ? AND ts_ns >= ? "
            "ORDER BY ts_ns DESC, id DESC LIMIT ?",
            (agent, kind, since_ns, limit),
        )
        return [str(r[0]) for r in rows]

    def prune(self, keep_days: int, now: float | None = None) -> None:
        """Drop evidence and counts older than `keep_days` (the longest window anything reads)."""
        cutoff_ns = int(((now if now is not None else time.time()) - keep_days * 86400) * 1e9)
        with self._db.write() as conn:
            conn.execute("DELETE FROM governance_evidence WHERE ts_ns < ?", (cutoff_ns,))
            conn.execute("DELETE FROM governance_activity WHERE day < ?", (cutoff_ns // DAY_NS,))
