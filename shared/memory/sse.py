"""Sessions of the deprecated SSE transport (CONTRACT 2.1), valid on every worker.

The stream lives in one worker; a POST /messages may land on another. Sessions are rows in SQLite, answers
for a stream held here go straight to its queue, and answers for a stream held elsewhere wait in an outbox
table that the holding worker drains.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from flux7.shared.db import Database

__all__ = ["SseSessions"]


class SseSessions:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._local: dict[str, asyncio.Queue[bytes]] = {}

    def open(self) -> tuple[str, asyncio.Queue[bytes]]:
        session = secrets.token_hex(16)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._local[session] = queue
        self.db.execute("INSERT INTO memory_sse_sessions (id, created_at) VALUES (?, ?)", (session, int(time.time())))
        return session, queue

    def close(self, session: str) -> None:
        self._local.pop(session, None)
        with self.db.write() as conn:
            conn.execute("DELETE FROM memory_sse_sessions WHERE id = ?", (session,))
            conn.execute("DELETE FROM memory_sse_outbox WHERE session = ?", (session,))

    def exists(self, session: str) -> bool:
        if session in self._local:
            return True
        return self.db.query_one("SELECT 1 FROM memory_sse_sessions WHERE id = ?", (session,)) is not None

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
