"""The approval queue (CONTRACT 1.8, 1.13): submit, wait, resolve, time out, and the MCP claim flow.

Every approval is a row in SQLite, so any worker or process can resolve what another one waits on:
- a waiter on the resolving worker is woken in-process at once;
- a waiter in another instance on PostgreSQL is woken by the NOTIFY the resolution sends at commit (the process's
  listener, shared/store/notify.py);
- a waiter elsewhere (another process on SQLite, or while the listener is down) is woken by a per-event-loop
  poller that reads one counter row (`approvals_clock`) every POLL_INTERVAL and looks at the approvals it waits
  on only when the counter moved; while notifications arrive it still looks every LISTENING_POLL_INTERVAL;
- a timeout is a resolution too (`system:timeout`), made by the waiter or by a sweep on the next access, so an
  approval nobody waits on (after a restart, or an MCP request) still times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.decisions.facts import resolver_kind
from flux7.shared.decisions.query import DecisionQuery
from flux7.shared.durations import format_duration
from flux7.shared.errors import BadRequest, Conflict, Forbidden, NotFound
from flux7.shared.gate.approval_settings import ApprovalPolicy, ApprovalSettingsStore
from flux7.shared.gate.audit import EventLog, rfc3339
from flux7.shared.gate.callbacks import Notifier
from flux7.shared.gate.grants import GrantView
from flux7.shared.gate.guard import injection_risk, redact
from flux7.shared.globs import glob_match
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database
from flux7.shared.tracing.entry import TraceView

__all__ = ["Approval", "ApprovalQueue", "ApprovalView", "DecisionQuery", "VoteView", "args_digest"]

log = logging.getLogger("flux7.approvals")

POLL_INTERVAL = 0.01  # one tiny read per tick, only while this loop has waiters
LISTENING_POLL_INTERVAL = 1.0  # the same check while NOTIFY wakes the waiters: a safety net only
CHANNEL = "flux7_approvals"  # the NOTIFY channel; its payload is the resolved ids, comma-separated
NOTIFY_CHUNK = 400  # ids per notification (PostgreSQL caps a payload at 8000 bytes)
SWEEP_INTERVAL = 1.0

Status = Literal["pending", "approved", "denied", "timeout"]


def args_digest(arguments: Any) -> str:
    """The identity of a call's arguments: equal JSON values give equal digests whatever the key order."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Approval(msgspec.Struct, kw_only=True):
    id: str
    agent_id: str
    tool: str
    params: Any
    trace_id: str
    policy_rule: str
    status: str
    created_at: str  # RFC3339 UTC
    expires_at: str
    resolved_by: str = ""
    resolved_note: str = ""  # what the resolving request said of itself; the resolver is from its credential
    resolved_at: str = ""
    reasoning: str = ""
    confidence: float | None = None
    injection_risk: bool = False
    args_digest: str = ""
    policy_version: str = ""
    used_at: str = ""
    session_id: str = ""
    callback_url: str = ""
    required_approvals: int = 1  # four eyes: distinct humans who must approve (one deny ends it)
    votes: tuple[Vote, ...] = ()  # who has voted so far (loaded with the approval when it needs several)
    preview: Any = None  # what the call would change, as its caller showed it ({kind: "diff", path, diff})
    requester_user: str = ""  # the user on whose behalf the agent called (a JWT's user claim): never its approver
    # The same times as epoch seconds, for arithmetic.
    created_ts: float = 0.0
    expires_ts: float = 0.0
    resolved_ts: float | None = None

    def remaining(self, now: float | None = None) -> float:
        return max(0.0, self.expires_ts - (time.time() if now is None else now))

    def view(self, expose_content: bool = True, now: float | None = None) -> ApprovalView:
        pending = self.status == "pending"
        several = self.required_approvals > 1
        return ApprovalView(
            id=self.id,
            agent_id=self.agent_id,
            tool=self.tool,
            params=self.params if expose_content else redact(self.params),
            trace_id=self.trace_id,
            policy_rule=self.policy_rule,
            status=self.status,
            created_at=self.created_at,
            remaining=format_duration(self.remaining(now)) if pending else "",
            resolved_by=self.resolved_by,
            resolved_note=self.resolved_note,
            resolver_kind=UNSET if pending else resolver_kind(self.resolved_by, self.resolved_note),
            resolved_at=self.resolved_at,
            reasoning=self.reasoning,
            confidence=self.confidence,
            injection_risk=self.injection_risk,
            required_approvals=self.required_approvals if several else UNSET,
            approvals=[v.view() for v in self.votes if v.decision == "approve"] if several else UNSET,
            preview=self.preview if expose_content or self.preview is None else {"kind": "redacted"},
            requester_user=self.requester_user,
        )

    @property
    def approved_votes(self) -> int:
        return sum(1 for v in self.votes if v.decision == "approve")


class Vote(msgspec.Struct, frozen=True):
    actor: str
    decision: str  # approve | deny
    at: float

    def view(self) -> VoteView:
        return VoteView(actor=self.actor, at=rfc3339(self.at))


class VoteView(msgspec.Struct):
    actor: str
    at: str  # RFC3339


class ApprovalView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The approvalView of CONTRACT 1.8, in wire order, empty fields left out; `params` is always there (null
    included). The routes add what they know of the asker (`actionable`: whether they may decide it now), the detail
    (`recent_traces`, `active_grants`, each left out when empty) and the decisions page (`fact_key`)."""

    id: str
    agent_id: str
    tool: str
    params: Any
    trace_id: str = ""
    policy_rule: str
    status: str  # pending | approved | denied | timeout
    created_at: str  # RFC3339
    remaining: str = ""  # pending only: a Go duration
    resolved_by: str = ""
    resolved_note: str = ""
    resolver_kind: str | UnsetType = UNSET  # settled only
    resolved_at: str = ""
    reasoning: str = ""
    confidence: float | None = None
    injection_risk: bool = False
    required_approvals: int | UnsetType = UNSET  # four eyes only, with the approvals so far
    approvals: list[VoteView] | UnsetType = UNSET
    preview: Any = None
    requester_user: str = ""
    actionable: bool | UnsetType = UNSET
    recent_traces: list[TraceView] = msgspec.field(default_factory=list)
    active_grants: list[GrantView] = msgspec.field(default_factory=list)
    fact_key: str = ""


def _from_row(row: Any) -> Approval:
    return Approval(
        id=row["id"],
        agent_id=row["agent_id"],
        tool=row["tool"],
        params=json.loads(row["params"]),
        trace_id=row["trace_id"],
        policy_rule=row["policy_rule"],
        status=row["status"],
        created_at=rfc3339(row["created_at"]),
        expires_at=rfc3339(row["expires_at"]),
        resolved_by=row["resolved_by"],
        resolved_note=row["resolved_note"],
        resolved_at=rfc3339(row["resolved_at"]),
        reasoning=row["reasoning"],
        confidence=row["confidence"],
        injection_risk=bool(row["injection_risk"]),
        args_digest=row["args_digest"],
        policy_version=row["policy_version"],
        used_at=rfc3339(row["used_at"]),
        session_id=row["session_id"],
        callback_url=row["callback_url"],
        required_approvals=int(row["required_approvals"]),
        preview=json.loads(row["preview"]) if row["preview"] else None,
        requester_user=row["requester_user"],
        created_ts=row["created_at"],
        expires_ts=row["expires_at"],
        resolved_ts=row["resolved_at"],
    )


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text)


class _LoopWaiters:
    """The approvals waited on in one event loop, and the poller task that watches them."""

    def __init__(self) -> None:
        self.events: dict[str, set[asyncio.Event]] = {}
        self.poller: asyncio.Task[None] | None = None


def _params_text(arguments: Any) -> str:
    """The stored text of a call's arguments; 400 when they are not JSON."""
    try:
        return json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise BadRequest(f"arguments are not JSON: {e}") from None


class ApprovalQueue:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        events: EventLog | None = None,
        notifier: Notifier | None = None,
        policy_version: Callable[[], str] | None = None,
    ) -> None:
        self._db = db
        self._settings = settings
        self._events = events or EventLog()  # a bare core (a test) records no events
        self.notifier = notifier
        self._policy_version = policy_version
        self.settings_store = ApprovalSettingsStore(db, settings)
        self._listeners: list[Callable[[Approval], None]] = []
        self._transaction_hooks: list[Callable[[Any, list[Approval]], None]] = []
        self._submit_hooks: list[Callable[[Any, Approval], None]] = []
        self._submit_listeners: list[Callable[[Approval], None]] = []
        self._lock = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaiters] = weakref.WeakKeyDictionary()
        self._subscribed = False

    # -- settings ---------------------------------------------------------------------------------------

    def effective_settings(self) -> ApprovalPolicy:
        return self.settings_store.effective()

    @property
    def expose_content(self) -> bool:
        return self._settings.supervisor.expose_content

    def add_listener(self, fn: Callable[[Approval], None]) -> None:
        """`fn` is called after every resolution and timeout, on the resolving thread: keep it short."""
        self._listeners.append(fn)

    def add_transaction_hook(self, fn: Callable[[Any, list[Approval]], None]) -> None:
        """`fn(conn, resolved)` runs inside every resolution's write transaction (timeouts included): what it
        writes commits with the resolution or not at all (the decision outbox). If it raises, nothing is resolved."""
        self._transaction_hooks.append(fn)

    def add_submit_hook(self, fn: Callable[[Any, Approval], None]) -> None:
        """`fn(conn, approval)` runs inside every submit's write transaction (the notification outbox): what it
        writes commits with the approval or not at all. If it raises, nothing is queued."""
        self._submit_hooks.append(fn)

    def add_submit_listener(self, fn: Callable[[Approval], None]) -> None:
        """`fn(approval)` is called after every submit has committed (a deliverer's wake-up): keep it short."""
        self._submit_listeners.append(fn)

    def _in_transaction(self, conn: Any, resolved: list[Approval]) -> None:
        for hook in self._transaction_hooks:
            hook(conn, resolved)

    # -- reads ---------------------------------------------------------------------------------------------

    def get(self, approval_id_or_prefix: str) -> Approval:
        """An approval by exact id or unique prefix; NotFound otherwise (an ambiguous prefix is not found)."""
        self.sweep()
        return self._lookup(approval_id_or_prefix)

    def _lookup(self, key: str) -> Approval:
        key = key.strip().lower()
        if not _is_hex(key) or len(key) > 16:
            raise NotFound("approval not found")
        if len(key) == 16:
            row = self._db.query_one("SELECT * FROM approvals WHERE id = ?", (key,))
            if row is None:
                raise NotFound("approval not found")
            return self._with_votes([_from_row(row)])[0]
        rows = self._db.query("SELECT * FROM approvals WHERE id >= ? AND id < ? ORDER BY id LIMIT 2", (key, key + "g"))
        if len(rows) != 1:
            raise NotFound("approval not found")
        return self._with_votes([_from_row(rows[0])])[0]

    def _with_votes(self, items: list[Approval], conn: Any = None) -> list[Approval]:
        """The approvals, those that need several humans with their votes."""
        ids = [a.id for a in items if a.required_approvals > 1]
        if not ids:
            return items
        marks = ", ".join("?" * len(ids))
        sql = f"SELECT approval_id, actor, decision, at FROM approval_votes WHERE approval_id IN ({marks}) ORDER BY at"
        rows = conn.execute(sql, tuple(ids)).fetchall() if conn is not None else self._db.query(sql, tuple(ids))
        votes: dict[str, list[Vote]] = {}
        for r in rows:
            votes.setdefault(r[0], []).append(Vote(r[1], r[2], float(r[3])))
        return [msgspec.structs.replace(a, votes=tuple(votes.get(a.id, ()))) if a.id in votes else a for a in items]

    def query(self, status: str = "pending", tool: str = "", limit: int = 1000) -> list[Approval]:
        """Newest first. `status` "pending" lists pending ones; any other value lists all (CONTRACT 1.6)."""
        self.sweep()
        if status == "pending":
            rows = self._db.query("SELECT * FROM approvals WHERE status = 'pending' ORDER BY created_at DESC")
        else:
            rows = self._db.query("SELECT * FROM approvals ORDER BY created_at DESC LIMIT ?", (max(1, limit),))
        items = [_from_row(r) for r in rows]
        if tool:
            items = [a for a in items if glob_match(tool, a.tool)]
        return self._with_votes(items)

    def decisions(self, query: DecisionQuery) -> tuple[list[Approval], int]:
        """Settled approvals (the decisions), newest first, filtered and paged: (this page, how many match)."""
        self.sweep()

        def names(column: str) -> list[str]:
            return [r[0] for r in self._db.query(f"SELECT DISTINCT {column} FROM approvals")]

        where, params = query.where(names)
        sql_where = f"WHERE {' AND '.join(where)}"
        row = self._db.query_one(f"SELECT count(*) FROM approvals {sql_where}", tuple(params))
        total = int(row[0]) if row is not None else 0
        rows = self._db.query(
            f"SELECT * FROM approvals {sql_where} ORDER BY resolved_at DESC, id DESC LIMIT ? OFFSET ?",
            (*params, query.limit, query.offset),
        )
        return self._with_votes([_from_row(r) for r in rows]), total

    def couple_history(self, agent: str, tool: str, *, exclude: str = "", limit: int = 50) -> list[Approval]:
        """The settled approvals of one agent and tool, newest first (a pending approval's precedents)."""
        rows = self._db.query(
            "SELECT * FROM approvals WHERE agent_id = ? AND tool = ? AND status != 'pending' AND id != ? "
            "ORDER BY resolved_at DESC, id DESC LIMIT ?",
            (agent, tool, exclude, max(1, limit)),
        )
        return [_from_row(r) for r in rows]

    def _current_version(self, given: str | None) -> str | None:
        if given is not None:
            return given
        return self._policy_version() if self._policy_version is not None else None

    def _find(self, status: str, agent: str, tool: str, arguments: Any, version: str | None) -> Approval | None:
        sql = (
            "SELECT * FROM approvals WHERE agent_id = ? AND tool = ? AND args_digest = ? AND status = ? "
            "AND expires_at > ? AND used_at IS NULL"
        )
        params: list[Any] = [agent, tool, args_digest(arguments), status, time.time()]
        if version is not None:
            sql += " AND policy_version = ?"
            params.append(version)
        row = self._db.query_one(sql + " ORDER BY created_at DESC LIMIT 1", tuple(params))
        return _from_row(row) if row is not None else None

    def find_pending(
        self, agent: str, tool: str, arguments: Any, *, policy_version: str | None = None
    ) -> Approval | None:
        self.sweep()
        return self._find("pending", agent, tool, arguments, self._current_version(policy_version))

    def find_denied(
        self, agent: str, tool: str, arguments: Any, *, policy_version: str | None = None
    ) -> Approval | None:
        """A refusal of this very call that is still within its validity: the agent is told not to retry."""
        return self._find("denied", agent, tool, arguments, self._current_version(policy_version))

    # -- writes ---------------------------------------------------------------------------------------------

    def submit(
        self,
        *,
        agent: str,
        tool: str,
        arguments: Any,
        trace_id: str,
        policy_rule: str,
        policy_version: str,
        session_id: str = "",
        callback_url: str = "",
        required_approvals: int = 1,
        preview: Any = None,
        requester_user: str = "",
        also: Callable[[Any, Approval], None] | None = None,
    ) -> Approval:
        """Queue a call for approval. `also(conn, approval)` runs in the same write transaction (the call's
        trace), so the approval and its trace are committed together or not at all. `required_approvals`: four
        eyes; `preview`: what the call would change (a diff its caller sent); `requester_user`: the user on whose
        behalf the agent called, who never approves it."""
        params_text = _params_text(arguments)
        now = time.time()
        timeout = self.effective_settings().timeout_seconds
        row = {
            "id": secrets.token_hex(8),
            "agent_id": agent,
            "tool": tool,
            "params": params_text,
            "args_digest": args_digest(arguments),
            "trace_id": trace_id,
            "policy_rule": policy_rule,
            "policy_version": policy_version,
            "session_id": session_id,
            "callback_url": callback_url,
            "injection_risk": int(injection_risk(arguments)),
            "created_at": now,
            "expires_at": now + timeout,
            "required_approvals": max(1, required_approvals),
            "preview": json.dumps(preview) if preview is not None else "",
            "requester_user": requester_user,
        }
        with self._db.write() as conn:
            stored = conn.execute(
                f"INSERT INTO approvals ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) RETURNING *",
                tuple(row.values()),
            ).fetchone()
            approval = _from_row(stored)
            if also is not None:
                also(conn, approval)
            for hook in self._submit_hooks:
                hook(conn, approval)
        for listener in list(self._submit_listeners):
            try:
                listener(approval)
            except Exception:  # a listener's fault never fails the submit
                log.exception("approval submit listener failed for %s", approval.id)
        return approval

    def record_settled(
        self,
        *,
        agent: str,
        tool: str,
        arguments: Any,
        trace_id: str,
        policy_rule: str,
        resolved_by: str,
        reasoning: str = "",
        session_id: str = "",
    ) -> Approval:
        """An approval decided the moment it was asked (a precedent auto-approval): a settled row, so the decision
        has an id, a place in the decisions list and its fact in the outbox like any other. It is marked used at
        once: nobody can claim it for another call."""
        params_text = _params_text(arguments)
        now = time.time()
        row = {
            "id": secrets.token_hex(8),
            "agent_id": agent,
            "tool": tool,
            "params": params_text,
            "args_digest": args_digest(arguments),
            "trace_id": trace_id,
            "policy_rule": policy_rule,
            "policy_version": self._current_version(None) or "",
            "session_id": session_id,
            "callback_url": "",
            "injection_risk": int(injection_risk(arguments)),
            "created_at": now,
            "expires_at": now,
            "status": "approved",
            "resolved_by": resolved_by,
            "resolved_at": now,
            "reasoning": reasoning,
            "used_at": now,
        }
        with self._db.write() as conn:
            stored = conn.execute(
                f"INSERT INTO approvals ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) RETURNING *",
                tuple(row.values()),
            ).fetchone()
            approval = _from_row(stored)
            self._in_transaction(conn, [approval])
        for listener in list(self._listeners):  # no waiter, no callback, no event trace: the call's trace says it
            try:
                listener(approval)
            except Exception:
                log.exception("approval listener failed for %s", approval.id)
        return approval

    def resolve(
        self,
        approval_id_or_prefix: str,
        decision: str,
        *,
        resolved_by: str,
        resolver: str,
        note: str = "",
        reasoning: str = "",
        confidence: float | None = None,
        human: bool = True,
        user: str = "",
    ) -> Approval:
        """`resolver` is the agent identity the resolution arrives with ("" for the admin credential, a person
        at the terminal, the system); the agent an approval belongs to never settles it, by any route.
        `resolved_by` names the credential; `note` is what the request said of itself (a decision whose note
        claims a machine resolver never counts as a human's: shared/decisions/facts.py resolver_kind). `human`:
        the resolver is a person (only people count toward four eyes); `user`: that person's user name, who never
        approves a call made on their own behalf.

        Four eyes (`required_approvals` > 1): an approval is a vote, counted once per resolver; the call is
        approved when that many distinct humans have voted so, and a single deny ends it. A vote that does not
        settle the approval answers it still pending, with its votes."""
        if decision not in ("approve", "deny"):
            raise BadRequest(f"decision must be approve or deny, not {decision!r}")
        self.sweep()
        target = self._lookup(approval_id_or_prefix)
        if resolver and resolver == target.agent_id:
            raise Forbidden(f"agent {resolver!r} cannot resolve its own approval")
        if user and user == target.requester_user:
            raise Forbidden(f"user {user!r} cannot decide a call made on their own behalf")
        status = "approved" if decision == "approve" else "denied"
        now = time.time()
        if target.required_approvals > 1 and target.status == "pending":
            if not human and decision == "approve":
                raise Forbidden(
                    f"this call needs {target.required_approvals} people to approve it: {resolved_by} cannot"
                )
            with self._db.write() as conn:
                conn.execute(
                    "INSERT INTO approval_votes (approval_id, actor, decision, reasoning, at) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (target.id, resolved_by, decision, reasoning, now),
                )
                votes = self._with_votes([target], conn)[0]
            if decision == "approve" and votes.approved_votes < target.required_approvals:
                return votes  # still pending: more people must approve
        with self._db.write() as conn:
            row = conn.execute(
                "UPDATE approvals SET status = ?, resolved_by = ?, resolved_note = ?, resolved_at = ?, reasoning = ?, "
                "confidence = ? "
                "WHERE id = ? AND status = 'pending' AND expires_at > ? RETURNING *",
                (status, resolved_by, note, now, reasoning, confidence, target.id, now),
            ).fetchone()
            if row is not None:
                conn.execute("UPDATE approvals_clock SET seq = seq + 1 WHERE id = 1")
                approval = _from_row(row)
                self._notify(conn, [approval])
                self._in_transaction(conn, [approval])
        if row is None:
            self.sweep()  # it may have just expired: make that a recorded timeout
            raise Conflict("approval already resolved")
        self._published([approval])
        return approval

    def resolve_matching(
        self, predicate: Callable[[Approval], bool], *, resolved_by: str, reasoning: str = ""
    ) -> list[Approval]:
        """Deny every pending approval the predicate selects (an emergency stop). Returns those denied."""
        self.sweep()
        now = time.time()
        denied: list[Approval] = []
        with self._db.write() as conn:
            pending = [_from_row(r) for r in conn.execute("SELECT * FROM approvals WHERE status = 'pending'")]
            for a in pending:
                if not predicate(a):
                    continue
                row = conn.execute(
                    "UPDATE approvals SET status = 'denied', resolved_by = ?, resolved_at = ?, reasoning = ? "
                    "WHERE id = ? AND status = 'pending' RETURNING *",
                    (resolved_by, now, reasoning, a.id),
                ).fetchone()
                if row is not None:
                    denied.append(_from_row(row))
            if denied:
                conn.execute("UPDATE approvals_clock SET seq = seq + 1 WHERE id = 1")
                self._notify(conn, denied)
                self._in_transaction(conn, denied)
        self._published(denied)
        return denied

    def claim_approved(
        self,
        agent: str,
        tool: str,
        arguments: Any,
        *,
        policy_version: str | None = None,
        also: Callable[[Any, Approval], None] | None = None,
    ) -> Approval | None:
        """Use up an approval of this very call (MCP claim flow, CONTRACT 1.14): approved, unexpired, same
        arguments and policy version, never used. Atomic across processes: one claim wins. `also(conn,
        approval)` runs in the same transaction (the call's intent trace): no approval is used up by a call
        that could not be traced."""
        version = self._current_version(policy_version)
        now = time.time()
        sql = (
            "SELECT id FROM approvals WHERE agent_id = ? AND tool = ? AND args_digest = ? "
            "AND status = 'approved' "
            "AND used_at IS NULL AND expires_at > ?"
        )
        params: list[Any] = [agent, tool, args_digest(arguments), now]
        if version is not None:
            sql += " AND policy_version = ?"
            params.append(version)
        with self._db.write() as conn:
            row = conn.execute(
                f"UPDATE approvals SET used_at = ? WHERE id = ({sql} ORDER BY resolved_at DESC LIMIT 1) "
                "AND used_at IS NULL RETURNING *",
                (now, *params),
            ).fetchone()
            claimed = _from_row(row) if row is not None else None
            if claimed is not None and also is not None:
                also(conn, claimed)
        return claimed

    def sweep(self) -> list[Approval]:
        """Resolve every overdue pending approval as `system:timeout` (a read first keeps it cheap)."""
        now = time.time()
        if (
            self._db.query_one("SELECT 1 FROM approvals WHERE status = 'pending' AND expires_at <= ? LIMIT 1", (now,))
            is None
        ):
            return []
        return self._time_out("status = 'pending' AND expires_at <= ?", (now,), now)

    def _time_out(self, where: str, params: tuple[Any, ...], now: float) -> list[Approval]:
        with self._db.write() as conn:
            rows = conn.execute(
                "UPDATE approvals SET status = 'timeout', resolved_by = 'system:timeout', resolved_at = ? "
                f"WHERE {where} RETURNING *",
                (now, *params),
            ).fetchall()
            expired = [_from_row(r) for r in rows]
            if rows:
                conn.execute("UPDATE approvals_clock SET seq = seq + 1 WHERE id = 1")
                self._notify(conn, expired)
                self._in_transaction(conn, expired)
        self._published(expired)
        return expired

    # -- waiting --------------------------------------------------------------------------------------------

    def _notify(self, conn: Any, resolved: list[Approval]) -> None:
        """Tell the other instances which approvals this transaction settles (sent at its commit)."""
        for start in range(0, len(resolved), NOTIFY_CHUNK):
            self._db.notify(conn, CHANNEL, ",".join(a.id for a in resolved[start : start + NOTIFY_CHUNK]))

    def _on_notify(self, payload: str) -> None:
        """On the listener's thread: wake whoever waits here on an approval another instance settled. A
        reconnection's payload names no approval; the poller's clock check covers what was missed."""
        self._wake([i for i in payload.split(",") if _is_hex(i)])

    async def wait(self, approval_id: str, timeout: float, *, resolve_on_timeout: bool = True) -> Approval:
        """Block until the approval is resolved, or `timeout` seconds (never past its expiry) have passed;
        then it is resolved as `system:timeout` (unless `resolve_on_timeout` is False) and returned."""
        approval = self.get(approval_id)
        if approval.status != "pending":
            return approval
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        self._register(loop, approval.id, event)
        try:
            # Registered before this read: a resolution from now on is seen by the event or by this read.
            approval = self._lookup(approval.id)
            if approval.status != "pending":
                return approval
            budget = min(timeout, approval.remaining())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), max(0.0, budget))
        finally:
            self._unregister(loop, approval.id, event)
        approval = self._lookup(approval.id)
        if approval.status == "pending" and resolve_on_timeout:
            self._time_out("id = ? AND status = 'pending'", (approval.id,), time.time())
            approval = self._lookup(approval.id)
        return approval

    async def wait_briefly(self, approval_id: str, seconds: float) -> Approval | None:
        """Wait up to `seconds` for a decision without timing the approval out; None while still pending."""
        approval = await self.wait(approval_id, seconds, resolve_on_timeout=False)
        return None if approval.status == "pending" else approval

    def waiting(self) -> int:
        """How many waits are blocked in this process (all event loops)."""
        with self._lock:
            return sum(len(events) for w in self._loops.values() for events in w.events.values())

    def _register(self, loop: asyncio.AbstractEventLoop, approval_id: str, event: asyncio.Event) -> None:
        with self._lock:
            subscribe = not self._subscribed
            self._subscribed = True
        if subscribe:  # the first wait of this process starts its listener (PostgreSQL)
            self._db.listen(CHANNEL, self._on_notify)
        with self._lock:
            waiters = self._loops.get(loop)
            if waiters is None:
                waiters = self._loops[loop] = _LoopWaiters()
            waiters.events.setdefault(approval_id, set()).add(event)
            if waiters.poller is None or waiters.poller.done():
                waiters.poller = loop.create_task(self._poll(loop, waiters), name="flux7-approval-poller")

    def _unregister(self, loop: asyncio.AbstractEventLoop, approval_id: str, event: asyncio.Event) -> None:
        with self._lock:
            waiters = self._loops.get(loop)
            if waiters is None:
                return
            events = waiters.events.get(approval_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del waiters.events[approval_id]

    def _wake(self, approval_ids: Iterable[str]) -> None:
        """Set the events of these approvals' waiters, in whichever loop (and thread) each waits."""
        with self._lock:
            targets = [
                (loop, list(waiters.events.get(i, ()))) for loop, waiters in self._loops.items() for i in approval_ids
            ]
        for loop, events in targets:
            for event in events:
                with contextlib.suppress(RuntimeError):  # the loop has closed
                    loop.call_soon_threadsafe(event.set)

    def _clock(self) -> int:
        row = self._db.query_one("SELECT seq FROM approvals_clock WHERE id = 1")
        return int(row[0]) if row is not None else 0

    async def _poll(self, loop: asyncio.AbstractEventLoop, waiters: _LoopWaiters) -> None:
        """While this loop has waiters: catch resolutions made by other processes, and overdue approvals."""
        seen = -1
        next_sweep = time.monotonic() + SWEEP_INTERVAL
        while True:
            with self._lock:
                ids = list(waiters.events)
                if not ids:
                    waiters.poller = None
                    return
            try:
                seq = self._clock()
                if seq != seen:
                    seen = seq
                    resolved: list[str] = []
                    for start in range(0, len(ids), 500):
                        chunk = ids[start : start + 500]
                        rows = self._db.query(
                            f"SELECT id FROM approvals WHERE status != 'pending' AND id IN "
                            f"({', '.join('?' * len(chunk))})",
                            tuple(chunk),
                        )
                        resolved.extend(r[0] for r in rows)
                    self._wake(resolved)
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + SWEEP_INTERVAL
                    self.sweep()
            except Exception:  # a busy or closing database: try again on the next tick
                log.exception("approval poller tick failed")
            await asyncio.sleep(LISTENING_POLL_INTERVAL if self._db.listening else POLL_INTERVAL)

    # -- after a resolution ------------------------------------------------------------------------------

    def event_body(self, approval: Approval, event: str) -> dict[str, Any]:
        """The JSON an approval's webhook and callback receive (CONTRACT 1.8)."""
        return self._event_body(approval, event)

    def _event_body(self, approval: Approval, event: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event": event,
            "id": approval.id,
            "agent_id": approval.agent_id,
            "tool": approval.tool,
            "params": approval.params if self.expose_content else redact(approval.params),
            "policy_rule": approval.policy_rule,
            "timestamp": rfc3339(time.time()),
        }
        if event != "pending":
            body["resolved_by"] = approval.resolved_by
        return body

    def _published(self, resolved: list[Approval]) -> None:
        """Everything a resolution sets off: waiters, the trace, the agent's callback, then the listeners."""
        if not resolved:
            return
        self._wake([a.id for a in resolved])
        for approval in resolved:
            self._events.record(
                tool="mesh.approval",
                actor=approval.resolved_by,
                agent_id=approval.agent_id,
                params={"approval_id": approval.id, "tool": approval.tool, "status": approval.status},
                policy_rule=f"approval:{approval.id}",
                session_id=approval.session_id,
                parent_trace_id=approval.trace_id,
                approval_id=approval.id,
                approval_status=approval.status,
                approved_by=approval.resolved_by,
                approval_ms=int(((approval.resolved_ts or approval.created_ts) - approval.created_ts) * 1000),
                supervisor_reasoning=approval.reasoning,
                supervisor_confidence=approval.confidence,
            )
            if approval.callback_url and self.notifier is not None:
                self.notifier.send(approval.callback_url, self._event_body(approval, approval.status), guard=True)
            for listener in list(self._listeners):
                try:
                    listener(approval)
                except Exception:  # a listener's fault never undoes or fails the resolution
                    log.exception("approval listener failed for %s", approval.id)
