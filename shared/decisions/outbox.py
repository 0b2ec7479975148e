"""The decision outbox: decision facts waiting for memory, durable in the database (migration 0013).

A resolution writes its fact here in the same transaction that resolves the approval, so an approval is never
settled without its fact; the writer then delivers the rows in `seq` order and deletes each once memory stored
it. A row is keyed by the fact's key (one per approval): a re-send after a crash is an upsert of the same memory.
One process delivers at a time (an flock beside the database), so the order holds across workers."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from typing import Any

import msgspec

from flux7.shared.store.db import Database

__all__ = ["DecisionOutbox", "OutboxRow"]


class OutboxRow(msgspec.Struct, frozen=True):
    seq: int
    key: str
    arguments: dict[str, Any]  # memory_store arguments


class DecisionOutbox:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock_path = "" if db.path == ":memory:" else db.path + ".outbox.lock"
        self._lock_fd = -1

    # -- writes -----------------------------------------------------------------------------------------

    @staticmethod
    def enqueue(conn: Any, *, key: str, approval_id: str, tool: str, agent: str, arguments: dict[str, Any]) -> None:
        """Add a fact inside the caller's write transaction. The same key twice is one row."""
        conn.execute(
            "INSERT INTO decision_outbox (key, approval_id, tool, agent_id, fact, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (key, approval_id, tool, agent, msgspec.json.encode(arguments).decode(), time.time()),
        )

    def add(self, *, key: str, approval_id: str, tool: str, agent: str, arguments: dict[str, Any]) -> None:
        with self._db.write() as conn:
            self.enqueue(conn, key=key, approval_id=approval_id, tool=tool, agent=agent, arguments=arguments)

    def delivered(self, seq: int) -> None:
        self._db.execute("DELETE FROM decision_outbox WHERE seq = ?", (seq,))

    def failed(self, seq: int, error: str) -> None:
        self._db.execute(
            "UPDATE decision_outbox SET attempts = attempts + 1, last_error = ?, last_attempt_at = ? WHERE seq = ?",
            (error[:500], time.time(), seq),
        )

    def drop(self, tool: str, agent: str) -> int:
        """Forget a couple: its facts not yet delivered go too (memory's copies are being deleted)."""
        return self._db.execute("DELETE FROM decision_outbox WHERE tool = ? AND agent_id = ?", (tool, agent))

    # -- reads ------------------------------------------------------------------------------------------

    def head(self, limit: int = 50) -> list[OutboxRow]:
        rows = self._db.query("SELECT seq, key, fact FROM decision_outbox ORDER BY seq LIMIT ?", (limit,))
        return [OutboxRow(int(r[0]), str(r[1]), msgspec.json.decode(r[2])) for r in rows]

    def pending(self) -> int:
        row = self._db.query_one("SELECT count(*) FROM decision_outbox")
        return int(row[0]) if row is not None else 0

    def oldest_error(self) -> str:
        row = self._db.query_one("SELECT last_error FROM decision_outbox ORDER BY seq LIMIT 1")
        return str(row[0]) if row is not None else ""

    # -- one deliverer at a time ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def delivering(self) -> Iterator[bool]:
        """True when this deliverer may send now; False while another process's is (the caller looks again
        shortly, since that one may have read the outbox before the newest rows were committed)."""
        if not self._lock_path:
            yield True
            return
        if self._lock_fd < 0:
            self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = -1
