"""The notification outbox (migration 0026): every webhook delivery, Slack post or update and email, durable first.

A row is written in the transaction that queues or settles its approval, so a crash or a restart loses none. Rows
are delivered in `seq` order within their lane (`webhook`, `slack`, `email`): a worker claims the lane's head for
a lease, delivers it, and deletes it; a failure puts the row back with a backoff (0.5 s doubling up to
`notify.retry_max_seconds`) and later rows wait behind it, so a receiver sees deliveries in order. A row that
failed `notify.max_attempts` times is kept as `failed` and the lane moves on; an operator sees it (`GET
/notifications/deliveries`, the `agent_mesh_notify_deliveries` gauge) and can queue it again (`retry`). The claim
is one conditional UPDATE, so with several workers (or instances on PostgreSQL) exactly one delivers a row at a
time. A worker that dies mid-delivery leaves its lease behind: a worker on the same machine that sees the holder
is gone (a restart after kill -9) takes the row at once; elsewhere the lease runs out first. Either way the row is
delivered again (at least once: receivers dedupe by id)."""

from __future__ import annotations

import time
from typing import Any, Literal, NamedTuple

import msgspec

from flux7.shared.notify.claimant import is_gone, this_process
from flux7.shared.store.db import Database

__all__ = ["LANES", "DeliveryView", "Lane", "NotificationOutbox", "OutboxItem"]

Lane = Literal["webhook", "slack", "email"]
LANES: tuple[Lane, ...] = ("webhook", "slack", "email")
LEASE_SECONDS = 120.0  # longer than any delivery's timeouts: a live worker never loses its claim
FIRST_RETRY_S = 0.5


class OutboxItem(msgspec.Struct, frozen=True):
    seq: int
    lane: str
    kind: str
    approval_id: str
    payload: dict[str, Any]
    attempts: int
    created_at: float


class DeliveryView(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery still owed or given up, as `GET /notifications/deliveries` shows it (the payload stays inside:
    it carries the call's arguments and, for email, signed links)."""

    seq: int
    lane: str  # webhook | slack | email
    kind: str  # webhook | slack.post | slack.update | email
    approval_id: str
    status: str  # queued (being tried) | failed (given up after notify.max_attempts, or refused for good)
    attempts: int
    last_error: str
    created_at: float
    next_attempt_at: float | None = None  # queued rows: when the next try is due


def _item(row: Any) -> OutboxItem:
    return OutboxItem(
        seq=int(row["seq"]),
        lane=str(row["lane"]),
        kind=str(row["kind"]),
        approval_id=str(row["approval_id"]),
        payload=msgspec.json.decode(row["payload"]),
        attempts=int(row["attempts"]),
        created_at=float(row["created_at"]),
    )


class _Head(NamedTuple):
    """A lane's head row: when it is next due, until when a living holder's lease runs (0: none), and the name
    of a holder proven gone (its lease no longer counts)."""

    next_attempt_at: float
    leased_until: float
    gone_holder: str | None


class NotificationOutbox:
    def __init__(self, db: Database, *, retry_max: float = 300.0, max_attempts: int = 20) -> None:
        self._db = db
        self.retry_max = max(FIRST_RETRY_S, retry_max)
        self.max_attempts = max(1, max_attempts)

    @staticmethod
    def enqueue(conn: Any, lane: Lane, kind: str, approval_id: str, payload: dict[str, Any]) -> None:
        """Add a delivery inside the caller's write transaction."""
        now = time.time()
        conn.execute(
            "INSERT INTO notify_outbox (lane, kind, approval_id, payload, created_at, next_attempt_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (lane, kind, approval_id, msgspec.json.encode(payload).decode(), now, now),
        )

    def add(self, lane: Lane, kind: str, approval_id: str, payload: dict[str, Any]) -> None:
        with self._db.write() as conn:
            self.enqueue(conn, lane, kind, approval_id, payload)

    def claim(self, lane: Lane) -> OutboxItem | None:
        """The lane's head, claimed for a lease, when it is due and nobody living holds it; else None."""
        now = time.time()
        item = self._claim(lane, now, gone_holder=None)
        if item is None and (head := self._head(lane)) is not None and head.gone_holder is not None:
            item = self._claim(lane, now, gone_holder=head.gone_holder)  # a restart after a kill takes over
        return item

    def _claim(self, lane: Lane, now: float, *, gone_holder: str | None) -> OutboxItem | None:
        # One conditional UPDATE; a holder proven gone is matched by name, so of two workers taking over the same
        # row only one wins.
        with self._db.write() as conn:
            row = conn.execute(
                "UPDATE notify_outbox SET claimed_until = ?, claimed_by = ? WHERE seq = ("
                "SELECT seq FROM notify_outbox WHERE lane = ? AND status = 'queued' ORDER BY seq LIMIT 1) "
                "AND next_attempt_at <= ? AND (claimed_until IS NULL OR claimed_until <= ? OR claimed_by = ?) "
                "RETURNING *",
                (now + LEASE_SECONDS, this_process() or None, lane, now, now, gone_holder),
            ).fetchone()
        return _item(row) if row is not None else None

    def delivered(self, item: OutboxItem) -> None:
        self._db.execute("DELETE FROM notify_outbox WHERE seq = ?", (item.seq,))

    def failed(self, item: OutboxItem, error: str, *, permanent: bool = False) -> bool:
        """Record a failed attempt: True when the row will be tried again, False when it was given up."""
        attempts = item.attempts + 1
        give_up = permanent or attempts >= self.max_attempts
        delay = min(self.retry_max, FIRST_RETRY_S * 2 ** min(attempts - 1, 20))
        self._db.execute(
            "UPDATE notify_outbox SET attempts = ?, last_error = ?, claimed_until = NULL, claimed_by = NULL, "
            "next_attempt_at = ?, "
            "status = ? WHERE seq = ?",
            (attempts, error[:500], time.time() + delay, "failed" if give_up else "queued", item.seq),
        )
        return not give_up

    def next_due(self, lane: Lane) -> float | None:
        """When the lane's head may be tried (epoch seconds), None when the lane is empty. A lease whose holder is
        provably gone does not count."""
        head = self._head(lane)
        return None if head is None else max(head.next_attempt_at, head.leased_until)

    def _head(self, lane: Lane) -> _Head | None:
        row = self._db.query_one(
            "SELECT next_attempt_at, claimed_until, claimed_by FROM notify_outbox WHERE lane = ? AND status = 'queued' "
            "ORDER BY seq LIMIT 1",
            (lane,),
        )
        if row is None:
            return None
        lease = float(row[1] or 0.0)
        if lease > time.time() and is_gone(row[2]):
            return _Head(float(row[0]), 0.0, str(row[2]))
        return _Head(float(row[0]), lease, None)

    def pending(self, lane: str | None = None) -> int:
        if lane is None:
            row = self._db.query_one("SELECT count(*) FROM notify_outbox WHERE status = 'queued'")
        else:
            row = self._db.query_one("SELECT count(*) FROM notify_outbox WHERE status = 'queued' AND lane = ?", (lane,))
        return int(row[0]) if row is not None else 0

    def rows(
        self, lane: str | None = None, status: str | None = None, limit: int = 1000, seq: int | None = None
    ) -> list[DeliveryView]:
        """The rows still held (queued or failed), oldest first; `lane`, `status` and `seq` narrow them."""
        where: list[str] = []
        params: list[Any] = []
        if seq is not None:
            where.append("seq = ?")
            params.append(seq)
        if lane is not None:
            where.append("lane = ?")
            params.append(lane)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = (
            "SELECT seq, lane, kind, approval_id, status, attempts, last_error, created_at, next_attempt_at "
            "FROM notify_outbox" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq LIMIT ?"
        )
        return [
            DeliveryView(
                seq=int(r[0]),
                lane=str(r[1]),
                kind=str(r[2]),
                approval_id=str(r[3]),
                status=str(r[4]),
                attempts=int(r[5]),
                last_error=str(r[6]),
                created_at=float(r[7]),
                next_attempt_at=float(r[8]) if r[4] == "queued" else None,
            )
            for r in self._db.query(sql, (*params, limit))
        ]

    def counts(self) -> dict[tuple[str, str], int]:
        """How many rows each (lane, status) holds: the gauge's series."""
        rows = self._db.query("SELECT lane, status, count(*) FROM notify_outbox GROUP BY lane, status")
        return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}

    def retry(self, seq: int) -> DeliveryView | None:
        """A failed row queued again, due now with its attempts reset (the receiver was fixed); None when `seq`
        names no failed row. It goes back to its place in the lane: rows are delivered in seq order."""
        with self._db.write() as conn:
            row = conn.execute(
                "UPDATE notify_outbox SET status = 'queued', attempts = 0, next_attempt_at = ?, claimed_until = NULL, "
                "claimed_by = NULL "
                "WHERE seq = ? AND status = 'failed' RETURNING seq",
                (time.time(), seq),
            ).fetchone()
        found = self.rows(seq=seq) if row is not None else []
        return found[0] if found else None
