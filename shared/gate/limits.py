"""Rate limits and loop detection (docs/approvals.md, "Rate limits and loop detection").

Limits come from the deciding policy's `rate_limit` (the agent's budget, over all its calls) and `tool_limits`
(a budget for the agent on each tool a glob matches, counted per tool); a call must fit every limit that
applies. The counts are per agent (not per policy) and live in the database, so every worker and instance
counts the same calls (on PostgreSQL a call's check and count are one transaction: exact across instances).
Loop detection runs wherever a policy has `rate_limit`, as the reference does, and on every call when the
top-level `loop_detection` block enables it. Only allowed or approved calls are recorded: denied ones never
count. An approved call is checked again when it is released, and counted in that same transaction (`admit`):
approvals released at once never let more calls through than the limit."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from flux7.shared.durations import format_duration
from flux7.shared.errors import Unavailable
from flux7.shared.globs import glob_match
from flux7.shared.gofmt import go_v
from flux7.shared.settings import Policy, RateLimit, Settings, ToolLimit
from flux7.shared.store.db import Database

__all__ = ["RateLimiter", "params_key"]

log = logging.getLogger("flux7.limits")

RECENT_CAP = 50  # the calls loop detection looks back over, per agent
MAX_AGENTS = 50_000  # running totals kept; the least recently active agents go first
MAX_TOOL_TOTALS = 200_000  # (agent, tool) running totals kept, the same way
GC_INTERVAL = 60.0
MINUTE = 60.0


def params_key(arguments: Any) -> str:
    """The reference compares the Go `%v` of the params map; a digest of it keeps the rows small."""
    return hashlib.sha256(go_v(arguments).encode("utf-8", "surrogatepass")).hexdigest()[:32]


class RateLimiter:
    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        self._gc_lock = threading.Lock()
        self._next_gc = 0.0

    def _loop_rule(self, policy: Policy | None) -> tuple[int, float] | None:
        """(threshold, window seconds) when loop detection applies to this call, else None."""
        cfg = self._settings.loop_detection
        if cfg.enabled:
            return max(1, cfg.threshold), cfg.window_seconds
        if policy is not None and policy.rate_limit is not None:
            return 3, 10.0
        return None

    def _applies(self, policy: Policy | None) -> tuple[RateLimit | None, tuple[int, float] | None]:
        return (policy.rate_limit if policy is not None else None), self._loop_rule(policy)

    @staticmethod
    def _tool_limits(policy: Policy | None, tool: str) -> list[ToolLimit]:
        if policy is None:
            return []
        return [t for t in policy.tool_limits if any(glob_match(g, tool) for g in t.tools)]

    def check(self, agent: str, policy: Policy | None, tool: str, arguments: Any, *, count: bool = False) -> str | None:
        """The error text of the first limit this call breaks, in the contract's order (the agent's budget,
        then the tool's, then loop detection); None within limits. With `count` (a call allowed unless a limit
        stops it), a call within limits is counted in the same write transaction as the check (`admit`), and the
        caller does not `record` it: calls checked at once (several workers on one SQLite file, several instances
        on one PostgreSQL) never let more through than the limit, where a check on a reader and a count later, with
        the intent trace, let every call in flight see room. The price: one more write transaction for a call a
        limit applies to (none for the others), and a call counted whose intent trace then fails to commit (a
        503) stays counted, which errs on the closed side."""
        limit, loop = self._applies(policy)
        per_tool = self._tool_limits(policy, tool)
        if limit is None and loop is None and not per_tool:
            return None
        now = time.time()
        if count:
            return self.admit(agent, policy, tool, arguments)
        return self._broken(self._db.reader.execute, agent, limit, loop, per_tool, tool, arguments, now)

    def admit(self, agent: str, policy: Policy | None, tool: str, arguments: Any, conn: Any = None) -> str | None:
        """Check and count a call in one write transaction, on either engine: the error text of the limit it
        breaks (nothing counted), or None (counted). What an approved call goes through when it is released:
        its check when it was queued saw none of the calls approved with it, and all of them may be released at
        once, on several instances. With `conn`, inside the caller's write transaction (which must be one that
        serialises with every other write: `Database.write()` without a row lock)."""
        limit, loop = self._applies(policy)
        per_tool = self._tool_limits(policy, tool)
        if limit is None and loop is None and not per_tool:
            return None
        if conn is None:
            # Serialised with every other write of the deployment: the counts read are the last committed ones.
            with self._db.write() as c:
                return self.admit(agent, policy, tool, arguments, conn=c)
        now = time.time()
        broken = self._broken(conn.execute, agent, limit, loop, per_tool, tool, arguments, now)
        if broken is None:
            self._insert(conn, agent, tool, arguments, now, per_tool=bool(per_tool))
        return broken

    def _broken(
        self,
        run: Any,
        agent: str,
        limit: RateLimit | None,
        loop: tuple[int, float] | None,
        per_tool: list[ToolLimit],
        tool: str,
        arguments: Any,
        now: float,
    ) -> str | None:
        """The check itself, its reads made through `run` (a reader's or a write transaction's execute)."""
        if limit is not None and limit.max_total > 0:
            row = run("SELECT total FROM rate_totals WHERE agent_id = ?", (agent,)).fetchone()
            if row is not None and row[0] >= limit.max_total:
                return f'rate_limit: agent "{agent}" exceeded total budget ({limit.max_total} calls)'
        if limit is not None and limit.max_per_minute > 0:
            row = run(
                "SELECT COUNT(*) FROM rate_events WHERE agent_id = ? AND at > ?", (agent, now - MINUTE)
            ).fetchone()
            if row is not None and row[0] >= limit.max_per_minute:
                return f'rate_limit: agent "{agent}" exceeded {limit.max_per_minute} calls/min'
        if per_tool:
            broken = self._check_tool(run, agent, tool, per_tool, now)
            if broken:
                return broken
        if loop is not None:
            threshold, window = loop
            key = params_key(arguments)
            recent = run(
                "SELECT tool, params_key, at FROM rate_events WHERE agent_id = ? ORDER BY at DESC LIMIT ?",
                (agent, RECENT_CAP),
            ).fetchall()
            same = sum(1 for r in recent if r[0] == tool and r[1] == key and r[2] > now - window)
            if same >= threshold:
                return (
                    f'loop_detected: agent "{agent}" called {tool} with same params {same} times '
                    f"in {format_duration(window)}"
                )
        return None

    def _check_tool(self, run: Any, agent: str, tool: str, limits: list[ToolLimit], now: float) -> str | None:
        max_total = min((t.max_total for t in limits if t.max_total > 0), default=0)
        if max_total:
            row = run("SELECT total FROM rate_tool_totals WHERE agent_id = ? AND tool = ?", (agent, tool)).fetchone()
            if row is not None and row[0] >= max_total:
                return f'rate_limit: agent "{agent}" exceeded total budget ({max_total} calls) on tool "{tool}"'
        per_minute = min((t.max_per_minute for t in limits if t.max_per_minute > 0), default=0)
        if per_minute:
            row = run(
                "SELECT COUNT(*) FROM rate_events WHERE agent_id = ? AND tool = ? AND at > ?",
                (agent, tool, now - MINUTE),
            ).fetchone()
            if row is not None and row[0] >= per_minute:
                return f'rate_limit: agent "{agent}" exceeded {per_minute} calls/min on tool "{tool}"'
        return None

    def record(self, agent: str, policy: Policy | None, tool: str, arguments: Any, conn: Any = None) -> None:
        """Count an allowed or approved call (only where a limit or loop detection applies to it). With `conn`,
        inside the caller's write transaction (the call's intent trace: a call refused untraced is not
        counted)."""
        limit, loop = self._applies(policy)
        per_tool = self._tool_limits(policy, tool)
        if limit is None and loop is None and not per_tool:
            return
        now = time.time()
        if conn is not None:
            self._insert(conn, agent, tool, arguments, now, per_tool=bool(per_tool))
            return  # the collection runs on a later call outside any transaction
        with self._db.write() as c:
            self._insert(c, agent, tool, arguments, now, per_tool=bool(per_tool))
        self._maybe_gc(now)

    @staticmethod
    def _insert(conn: Any, agent: str, tool: str, arguments: Any, now: float, *, per_tool: bool) -> None:
        conn.execute(
            "INSERT INTO rate_events (agent_id, tool, params_key, at) VALUES (?, ?, ?, ?)",
            (agent, tool, params_key(arguments), now),
        )
        conn.execute(
            "INSERT INTO rate_totals (agent_id, total, last_at) VALUES (?, 1, ?) "
            "ON CONFLICT(agent_id) DO UPDATE SET total = rate_totals.total + 1, last_at = excluded.last_at",
            (agent, now),
        )
        if per_tool:
            conn.execute(
                "INSERT INTO rate_tool_totals (agent_id, tool, total, last_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT(agent_id, tool) DO UPDATE SET total = rate_tool_totals.total + 1,"
                " last_at = excluded.last_at",
                (agent, tool, now),
            )

    def collect(self) -> None:
        """The periodic clean-up, for callers that record inside their own transaction. A store that cannot
        take the write now is tried again a minute later."""
        try:
            self._maybe_gc(time.time())
        except Unavailable:
            log.warning("rate limits: clean-up skipped, the store is busy")

    def _maybe_gc(self, now: float) -> None:
        with self._gc_lock:
            if now < self._next_gc:
                return
            self._next_gc = now + GC_INTERVAL
        keep = max(MINUTE, self._settings.loop_detection.window_seconds, 10.0)
        with self._db.write() as conn:
            conn.execute("DELETE FROM rate_events WHERE at < ?", (now - keep,))
            conn.execute(
                "DELETE FROM rate_totals WHERE agent_id IN (SELECT agent_id FROM rate_totals "
                f"ORDER BY last_at DESC {self._db.offset_sql})",
                (MAX_AGENTS,),
            )
            conn.execute(
                "DELETE FROM rate_tool_totals WHERE (agent_id, tool) IN (SELECT agent_id, tool FROM rate_tool_totals "
                f"ORDER BY last_at DESC {self._db.offset_sql})",
                (MAX_TOOL_TOTALS,),
            )

    def reset(self, agent: str | None = None) -> None:
        """Forget the counts (of one agent, or all): an operator's reset after raising a budget."""
        with self._db.write() as conn:
            if agent is None:
                conn.execute("DELETE FROM rate_events")
                conn.execute("DELETE FROM rate_totals")
                conn.execute("DELETE FROM rate_tool_totals")
            else:
                conn.execute("DELETE FROM rate_events WHERE agent_id = ?", (agent,))
                conn.execute("DELETE FROM rate_totals WHERE agent_id = ?", (agent,))
                conn.execute("DELETE FROM rate_tool_totals WHERE agent_id = ?", (agent,))
