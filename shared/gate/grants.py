"""Temporal grants (CONTRACT 1.9): an agent glob may call a tools glob without approval until a time.

A grant lifts `human_approval` only, never `deny` (the pipeline's rule). Grants are rows, so they hold on
every worker and survive a kill; an emergency stop revokes them with its id, and a resume restores the
unexpired ones."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

import msgspec

from flux7.shared.durations import format_duration
from flux7.shared.errors import BadRequest, Forbidden, NotFound
from flux7.shared.gate.audit import EventLog, rfc3339
from flux7.shared.globs import glob_match
from flux7.shared.store.db import Database

__all__ = ["MCP_MAX_SECONDS", "Grant", "GrantStore", "GrantView"]

MCP_MAX_SECONDS = 24 * 3600
MIN_PREFIX = 4


class Grant(msgspec.Struct, kw_only=True):
    id: str
    agent: str
    tools: str
    created_at: str
    expires_at: str
    granted_by: str
    approval_id: str = ""
    trace_id: str = ""
    revoked_at: str = ""
    revoked_by: str = ""
    halt_id: str = ""
    created_ts: float = 0.0
    expires_ts: float = 0.0

    def view(self, now: float | None = None) -> GrantView:
        left = self.expires_ts - (time.time() if now is None else now)
        return GrantView(
            id=self.id,
            agent=self.agent,
            tools=self.tools,
            expires_at=self.expires_at,
            remaining=format_duration(max(0.0, left)),
            granted_by=self.granted_by,
            approval_id=self.approval_id,
            trace_id=self.trace_id,
        )


class GrantView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The grantView of CONTRACT 1.9."""

    id: str
    agent: str
    tools: str
    expires_at: str  # RFC3339
    remaining: str  # a Go duration
    granted_by: str
    approval_id: str = ""
    trace_id: str = ""


def _from_row(row: Any) -> Grant:
    return Grant(
        id=row["id"],
        agent=row["agent"],
        tools=row["tools"],
        created_at=rfc3339(row["created_at"]),
        expires_at=rfc3339(row["expires_at"]),
        granted_by=row["granted_by"],
        approval_id=row["approval_id"],
        trace_id=row["trace_id"],
        revoked_at=rfc3339(row["revoked_at"]),
        revoked_by=row["revoked_by"],
        halt_id=row["halt_id"],
        created_ts=row["created_at"],
        expires_ts=row["expires_at"],
    )


_ACTIVE = "revoked_at IS NULL AND expires_at > ?"


class GrantStore:
    def __init__(self, db: Database, *, events: EventLog | None = None) -> None:
        self._db = db
        self._events = events or EventLog()

    def create(
        self,
        agent: str,
        tools: str,
        duration_s: float,
        granted_by: str,
        approval_id: str = "",
        trace_id: str = "",
        *,
        grantor: str = "",
        max_seconds: float | None = None,
    ) -> Grant:
        """`grantor` is the agent identity the request arrives with ("" for the admin credential): an agent may
        not grant itself (a grant is standing approval). `max_seconds` caps the duration (the MCP tool's 24 h)."""
        agent, tools = agent.strip(), tools.strip()
        if not agent or not tools or not duration_s:
            raise BadRequest("agent, tools, and duration are required")
        if grantor and glob_match(agent, grantor):
            raise Forbidden(f"agent {grantor!r} cannot grant itself ({agent!r} matches it)")
        if duration_s < 0:
            raise BadRequest("invalid duration: must be positive")
        if max_seconds is not None:
            duration_s = min(duration_s, max_seconds)
        now = time.time()
        row = (secrets.token_hex(8), agent, tools, now, now + duration_s, granted_by, approval_id, trace_id)
        with self._db.write() as conn:
            stored = conn.execute(
                "INSERT INTO grants (id, agent, tools, created_at, expires_at, granted_by, approval_id, "
                "trace_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
                row,
            ).fetchone()
        grant = _from_row(stored)
        self._events.record(
            tool="mesh.grant",
            actor=granted_by,
            params={
                "grant_id": grant.id,
                "agent": agent,
                "tools": tools,
                "duration": format_duration(duration_s),
            },
            policy_rule=f"grant:{grant.id}",
            grant_id=grant.id,
            approval_id=approval_id,
            parent_trace_id=trace_id,
        )
        return grant

    def active(self) -> list[Grant]:
        rows = self._db.query(f"SELECT * FROM grants WHERE {_ACTIVE} ORDER BY created_at DESC", (time.time(),))
        return [_from_row(r) for r in rows]

    def find(self, agent: str, tool: str) -> Grant | None:
        """The active grant covering this call, the longest-lived first; None when there is none."""
        for grant in sorted(self.active(), key=lambda g: -g.expires_ts):
            if glob_match(grant.agent, agent) and glob_match(grant.tools, tool):
                return grant
        return None

    def active_for_agent(self, agent: str) -> list[Grant]:
        return [g for g in self.active() if glob_match(g.agent, agent)]

    def revoke(self, id_or_prefix: str, *, by: str) -> Grant:
        """Revoke one active grant by id or a unique prefix of at least 4 characters."""
        key = id_or_prefix.strip().lower()
        now = time.time()
        if len(key) < MIN_PREFIX:
            raise NotFound("grant not found")
        with self._db.write() as conn:
            rows = conn.execute(
                f"SELECT id FROM grants WHERE {_ACTIVE} AND substr(id, 1, ?) = ? LIMIT 2",
                (now, len(key), key),
            ).fetchall()
            if len(rows) != 1:
                raise NotFound("grant not found")
            stored = conn.execute(
                "UPDATE grants SET revoked_at = ?, revoked_by = ? WHERE id = ? RETURNING *",
                (now, by, rows[0][0]),
            ).fetchone()
        grant = _from_row(stored)
        self._events.record(
            tool="mesh.grant_revoke",
            actor=by,
            params={"grant_id": grant.id, "agent": grant.agent, "tools": grant.tools},
            policy_rule=f"grant:{grant.id}",
            grant_id=grant.id,
        )
        return grant

    # -- emergency stops (called inside the stop's transaction) ----------------------------------------------

    @staticmethod
    def revoke_for_halt(conn: Any, halt_id: str, covers: Callable[[str], bool], by: str) -> list[str]:
        """Revoke the active grants whose agent glob the stop covers; returns their ids."""
        now = time.time()
        rows = conn.execute(f"SELECT id, agent FROM grants WHERE {_ACTIVE}", (now,)).fetchall()
        ids = [r["id"] for r in rows if covers(r["agent"])]
        for grant_id in ids:
            conn.execute(
                "UPDATE grants SET revoked_at = ?, revoked_by = ?, halt_id = ? WHERE id = ?",
                (now, by, halt_id, grant_id),
            )
        return ids

    @staticmethod
    def restore_for_halt(conn: Any, halt_id: str, still_stopped: Callable[[str], str]) -> int:
        """Restore the unexpired grants this stop revoked. A grant another active stop also covers passes to
        that stop (`still_stopped` gives its id, or "") and comes back when that one is resumed."""
        now = time.time()
        rows = conn.execute(
            "SELECT id, agent FROM grants WHERE halt_id = ? AND revoked_at IS NOT NULL AND expires_at > ?",
            (halt_id, now),
        ).fetchall()
        restored = 0
        for row in rows:
            other = still_stopped(row["agent"])
            if other:
                conn.execute("UPDATE grants SET halt_id = ? WHERE id = ?", (other, row["id"]))
                continue
            conn.execute(
                "UPDATE grants SET revoked_at = NULL, revoked_by = '', halt_id = '' WHERE id = ?",
                (row["id"],),
            )
            restored += 1
        return restored
