"""The emergency stop (CONTRACT 1.10): block everyone, an agent glob, or a session, before anything else runs.

A stop revokes the grants of what it covers and denies its pending approvals; a resume gives back the grants
that have not expired. Stops are rows, so every worker sees one within CACHE_SECONDS; on PostgreSQL a stop or a
resume also sends a NOTIFY at commit that empties every instance's cache at once."""

from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.errors import BadRequest, NotFound
from flux7.shared.gate.approvals import Approval, ApprovalQueue
from flux7.shared.gate.audit import EventLog, rfc3339
from flux7.shared.gate.grants import GrantStore
from flux7.shared.globs import glob_match
from flux7.shared.store.db import Database

__all__ = ["CACHE_SECONDS", "Halt", "HaltRegistry", "HaltResult", "HaltView"]

CACHE_SECONDS = 1.0
# While an engine that notifies (PostgreSQL) has lost its listener: a stop on another instance is seen by
# re-reading, so the cache is kept shorter to stay within a second of it.
UNNOTIFIED_CACHE_SECONDS = 0.5
CHANNEL = "flux7_halts"  # the NOTIFY channel: any message on it empties the cache
Scope = Literal["all", "agent", "session"]


class Halt(msgspec.Struct, kw_only=True):
    id: str
    scope: str
    target: str = ""
    reason: str = ""
    created_by: str = ""
    created_at: str = ""
    revoked_grants: list[str] = []
    denied_approvals: int = 0
    resumed_at: str = ""
    resumed_by: str = ""

    @property
    def active(self) -> bool:
        return not self.resumed_at

    @property
    def message(self) -> str:
        """What a blocked call is told."""
        what = "all agents" if self.scope == "all" else f"{self.scope} {self.target}"
        text = f"halted: emergency stop {self.id[:8]} in force for {what}"
        return f"{text}: {self.reason}" if self.reason else text

    def covers(self, agent: str, session: str) -> bool:
        if self.scope == "all":
            return True
        if self.scope == "agent":
            return glob_match(self.target, agent)
        return bool(session) and session == self.target

    def covers_agent(self, agent_glob: str) -> bool:
        """Whether the stop takes a grant for `agent_glob` away. A session stop leaves grants alone."""
        return self.scope == "all" or (self.scope == "agent" and glob_match(self.target, agent_glob))

    def view(self) -> HaltView:
        return HaltView(
            id=self.id,
            scope=self.scope,
            target=self.target,
            reason=self.reason,
            created_by=self.created_by,
            created_at=self.created_at,
            revoked_grants=list(self.revoked_grants),
            denied_approvals=self.denied_approvals,
            active=self.active,
            resumed_at=self.resumed_at,
            resumed_by=self.resumed_by if self.resumed_at else UNSET,
        )


class HaltView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A stop as GET /halts and its changes answer it (CONTRACT 1.10): empty fields left out; `resumed_by` comes
    with `resumed_at`, even when empty."""

    id: str
    scope: str  # all | agent | session
    target: str = ""
    reason: str = ""
    created_by: str = ""
    created_at: str
    revoked_grants: list[str] = msgspec.field(default_factory=list)
    denied_approvals: int = 0
    active: bool
    resumed_at: str = ""
    resumed_by: str | UnsetType = UNSET


class HaltResult(msgspec.Struct, kw_only=True):
    halt: Halt
    already_active: bool = False
    revoked_grants: int = 0
    denied_approvals: int = 0
    restored_grants: int = 0


def _from_row(row: Any) -> Halt:
    return Halt(
        id=row["id"],
        scope=row["scope"],
        target=row["target"],
        reason=row["reason"],
        created_by=row["created_by"],
        created_at=rfc3339(row["created_at"]),
        revoked_grants=json.loads(row["revoked_grants"]),
        denied_approvals=row["denied_approvals"],
        resumed_at=rfc3339(row["resumed_at"]),
        resumed_by=row["resumed_by"],
    )


class HaltRegistry:
    def __init__(
        self, db: Database, grants: GrantStore, approvals: ApprovalQueue, *, events: EventLog | None = None
    ) -> None:
        self._db = db
        self._grants = grants
        self._approvals = approvals
        self._events = events or EventLog()
        self._lock = threading.Lock()
        self._cache: tuple[float, list[Halt]] = (float("-inf"), [])
        self._generation = 0  # bumped by every invalidation: a read that straddles one is not cached
        self._subscribed = False
        self._notified = False  # the engine notifies (PostgreSQL)

    def active(self) -> list[Halt]:
        rows = self._db.query("SELECT * FROM halts WHERE resumed_at IS NULL ORDER BY created_at DESC")
        return [_from_row(r) for r in rows]

    def all(self, limit: int = 200) -> list[Halt]:
        rows = self._db.query("SELECT * FROM halts ORDER BY created_at DESC LIMIT ?", (max(1, limit),))
        return [_from_row(r) for r in rows]

    def _active_cached(self) -> list[Halt]:
        now = time.monotonic()
        with self._lock:
            if not self._subscribed:  # the first check of this process starts its listener (PostgreSQL)
                self._subscribed = True
                self._notified = self._db.listen(CHANNEL, self._on_notify)
            at, halts = self._cache
            ttl = UNNOTIFIED_CACHE_SECONDS if self._notified and not self._db.listening else CACHE_SECONDS
            if now - at < ttl:
                return halts
            generation = self._generation
        halts = self.active()
        with self._lock:
            if generation == self._generation:
                self._cache = (now, halts)
        return halts

    def _invalidate(self) -> None:
        with self._lock:
            self._generation += 1
            self._cache = (float("-inf"), [])

    def _on_notify(self, payload: str) -> None:
        """On the listener's thread: another instance stopped or resumed (or the listener reconnected)."""
        self._invalidate()

    def active_for(self, agent: str, session: str) -> Halt | None:
        """The stop that blocks this call, if any; the oldest first, so the message is stable."""
        for halt in reversed(self._active_cached()):
            if halt.covers(agent, session):
                return halt
        return None

    def create(self, scope: str, target: str, reason: str, by: str) -> HaltResult:
        if scope not in ("all", "agent", "session"):
            raise BadRequest("scope must be all, agent or session")
        target = "" if scope == "all" else target.strip()
        if scope != "all" and not target:
            raise BadRequest(f"target is required for scope {scope}")
        halt_id = secrets.token_hex(8)
        probe = Halt(id=halt_id, scope=scope, target=target)
        with self._db.write() as conn:
            existing = conn.execute(
                "SELECT * FROM halts WHERE resumed_at IS NULL AND scope = ? AND target = ? LIMIT 1",
                (scope, target),
            ).fetchone()
            if existing is not None:
                return HaltResult(halt=_from_row(existing), already_active=True)
            revoked = GrantStore.revoke_for_halt(conn, halt_id, probe.covers_agent, f"halt:{halt_id}")
            conn.execute(
                "INSERT INTO halts (id, scope, target, reason, created_by, created_at, revoked_grants) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (halt_id, scope, target, reason, by, time.time(), json.dumps(revoked)),
            )
            self._db.notify(conn, CHANNEL, halt_id)
        self._invalidate()

        def stopped(a: Approval) -> bool:
            return probe.covers(a.agent_id, a.session_id)

        denied = self._approvals.resolve_matching(
            stopped, resolved_by=f"halt:{halt_id}", reasoning=reason or "emergency stop"
        )
        if denied:
            self._db.execute("UPDATE halts SET denied_approvals = ? WHERE id = ?", (len(denied), halt_id))
        halt = self._get(halt_id)
        self._events.record(
            tool="mesh.halt",
            actor=by,
            params={"halt_id": halt_id, "scope": scope, "target": target, "reason": reason},
            policy="halted",
            policy_rule=f"halt:{halt_id}",
        )
        return HaltResult(halt=halt, revoked_grants=len(revoked), denied_approvals=len(denied))

    def _get(self, halt_id: str) -> Halt:
        row = self._db.query_one("SELECT * FROM halts WHERE id = ?", (halt_id,))
        if row is None:
            raise NotFound("halt not found")
        return _from_row(row)

    def resume(self, id_or_prefix: str, by: str) -> HaltResult:
        """End a stop and restore its unexpired grants. Resuming an ended stop changes nothing."""
        key = id_or_prefix.strip().lower()
        if not key:
            raise NotFound("halt not found")
        with self._db.write() as conn:
            rows = conn.execute("SELECT * FROM halts WHERE substr(id, 1, ?) = ? LIMIT 2", (len(key), key)).fetchall()
            if len(rows) != 1:
                raise NotFound("halt not found")
            halt = _from_row(rows[0])
            if not halt.active:
                return HaltResult(halt=halt)
            conn.execute("UPDATE halts SET resumed_at = ?, resumed_by = ? WHERE id = ?", (time.time(), by, halt.id))
            others = [_from_row(r) for r in conn.execute("SELECT * FROM halts WHERE resumed_at IS NULL").fetchall()]

            def still_stopped(agent_glob: str) -> str:
                return next((h.id for h in others if h.covers_agent(agent_glob)), "")

            restored = GrantStore.restore_for_halt(conn, halt.id, still_stopped)
            self._db.notify(conn, CHANNEL, halt.id)
        self._invalidate()
        self._events.record(
            tool="mesh.resume",
            actor=by,
            params={
                "halt_id": halt.id,
                "scope": halt.scope,
                "target": halt.target,
                "restored_grants": restored,
            },
            policy_rule=f"halt:{halt.id}",
        )
        return HaltResult(halt=self._get(halt.id), restored_grants=restored)
