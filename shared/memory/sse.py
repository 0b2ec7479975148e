"""Sessions of the deprecated SSE transport (CONTRACT 2.1), valid on every worker.

A session belongs to the credential that opened it: a POST /messages presenting another (or none where the
opener presented one) is answered as for an unknown session, so nobody answers into another caller's stream.
The stream lives in one worker; a POST /messages may land on another. Sessions are rows in SQLite, answers
for a stream held here go straight to its queue, and answers for a stream held elsewhere wait in an outbox
table that the holding worker drains.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time

from flux7.shared.store.db import Database

__all__ = ["SseSessions"]


class SseSessions:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._local: dict[str, asyncio.Queue[bytes]] = {}

    def open(self, authorization: str) -> tuple[str, asyncio.Queue[bytes]]:
        """A new session, owned by the request's `Authorization` header (kept as a digest, never the secret)."""
        session = secrets.token_hex(16)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._local[session] = queue
        self.db.execute(
            "INSERT INTO memory_sse_sessions (id, created_at, owner) VALUES (?, ?, ?)",
            (session, int(time.time()), _owner(authorization)),
        )
        return session, queue

    def close(self, session: str) -> None:
        self._local.pop(session, None)
        with self.db.write() as conn:
            conn.execute("DELETE FROM memory_sse_sessions WHERE id = ?", (session,))
            conn.execute("DELETE FROM memory_sse_outbox WHERE session = ?", (session,))

    def owned_by(self, session: str, authorization: str) -> bool:
        """The session exists and was opened with this same credential."""
        row = self.db.query_one("SELECT owner FROM memory_sse_sessions WHERE id = ?", (session,))
        return row is not None and hmac.compare_digest(str(row[0]), _owner(authorization))

    def deliver(self, session: str, payload: bytes) -> None:
        queue = self._local.get(session)
        if queue is not None:
            queue.put_nowait(payload)
            return
        self.db.execute("INSERT INTO memory_sse_outbox (session, payload) VALUES (?, ?)", (session, payload))

    def drain(self, session: str) -> list[bytes]:
        """Answers another worker left for a stream held here, oldest first."""
        if self.db.query_one("SELECT 1 FROM memory_sse_outbox WHERE session = ? LIMIT 1", (session,)) is None:
            return []
        with self.db.write() as conn:
            rows = conn.execute(
                "DELETE FROM memory_sse_outbox WHERE session = ? RETURNING id, payload", (session,)
            ).fetchall()
        return [bytes(r[1]) for r in sorted(rows, key=lambda r: r[0])]


def _owner(authorization: str) -> str:
    return hashlib.sha256(authorization.strip().encode()).hexdigest()
