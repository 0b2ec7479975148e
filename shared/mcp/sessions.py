"""MCP sessions of the handshake era, as SQLite rows: a session opened on one worker is valid on every other
and after a restart (docs/design/README.md). Each session keeps the caller of the request that opened it."""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec

from flux7.shared.auth.identity import Caller
from flux7.shared.store.db import Database

__all__ = ["IDLE_SECONDS", "McpSession", "SessionStore", "same_identity"]

# A session nobody used for this long is gone (the table must not grow without bound).
IDLE_SECONDS = 24 * 3600.0
# last_seen is refreshed at most this often, so a busy session does not write on every request.
TOUCH_SECONDS = 60.0


class McpSession(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    caller: Caller
    protocol_version: str
    client_name: str
    created_at: float
    last_seen: float


def same_identity(opener: Caller, presented: Caller) -> bool:
    """A session is used only by the identity that opened it: the same agent and user, and a proven identity
    (agent token or JWT) proven again — a bare claim or no credential never rides a proven session."""
    return (
        presented.agent_id == opener.agent_id
        and presented.user_id == opener.user_id
        and presented.authenticated == opener.authenticated
        and (presented.verified or not opener.verified)
    )


def _from_row(row: Any) -> McpSession:
    return McpSession(
        id=row["id"],
        caller=Caller(
            agent_id=row["agent_id"],
            user_id=row["user_id"],
            authenticated=bool(row["authenticated"]),
            via_jwt=bool(row["via_jwt"]),
            via_token=bool(row["via_token"]),
        ),
        protocol_version=row["protocol_version"],
        client_name=row["client_name"],
        created_at=row["created_at"],
        last_seen=row["last_seen"],
    )


class SessionStore:
    def __init__(self, db: Database, *, idle_seconds: float = IDLE_SECONDS) -> None:
        self._db = db
        self._idle = idle_seconds

    def create(self, caller: Caller, protocol_version: str, client_name: str = "") -> McpSession:
        """A new session; the id is always minted here, never taken from the client."""
        now = time.time()
        sid = secrets.token_hex(16)
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO mcp_sessions (id, agent_id, user_id, authenticated, via_jwt, via_token, protocol_version, "
                "client_name, created_at, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    caller.agent_id,
                    caller.user_id,
                    int(caller.authenticated),
                    int(caller.via_jwt),
                    int(caller.via_token),
                    protocol_version,
                    client_name[:200],
                    now,
                    now,
                ),
            )
            # Forget idle sessions while we hold the writer anyway.
            conn.execute("DELETE FROM mcp_sessions WHERE last_seen < ?", (now - self._idle,))
        return McpSession(
            id=sid,
            caller=caller,
            protocol_version=protocol_version,
            client_name=client_name[:200],
            created_at=now,
            last_seen=now,
        )

    def get(self, session_id: str) -> McpSession | None:
        """The live session with this id, or None (unknown, ended, or idle too long)."""
        if not session_id or len(session_id) > 128:
            return None
        row = self._db.query_one("SELECT * FROM mcp_sessions WHERE id = ?", (session_id,))
        if row is None:
            return None
        session = _from_row(row)
        now = time.time()
        if session.last_seen < now - self._idle:
            return None
        if session.last_seen < now - TOUCH_SECONDS:
            self._db.execute("UPDATE mcp_sessions SET last_seen = ? WHERE id = ?", (now, session_id))
        return session

    def delete(self, session_id: str) -> bool:
        if not session_id or len(session_id) > 128:
            return False
        return self._db.execute("DELETE FROM mcp_sessions WHERE id = ?", (session_id,)) > 0
