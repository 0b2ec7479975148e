"""Group commit: the writes of concurrent calls committed together, one transaction for a batch.

A call queues its write and awaits it; the first write queued in an event-loop turn schedules a flush for the
next turn, which runs every write queued meanwhile in one `Database.write()` (BEGIN IMMEDIATE ... COMMIT: the
flock still orders the processes of a deployment, each process batches its own). Writes that arrive while a
batch commits form the next one. A caller's result is set only after COMMIT returned: nothing is answered
before its row is durable. A batch that fails (the store locked, a statement refused, COMMIT) fails every caller
in it with the same exception, and each of them refuses its call as a lone write would have.

The flush runs on the event loop's own thread, as the lone writes it replaces did: no thread hand-off per call
(which costs more CPU than a small commit). Only waiting is handed off: when another process of the deployment
holds the write lock, a helper thread blocks on it and hands the flush back to the loop once it is held, so the
loop serves other calls meanwhile (waiting on the loop itself kept a second worker blocked a quarter of its
time at c=32, docs/benchmarks.md), and the writes queued while it waited join the batch.

A write queued when nothing else is ready to run in this turn (and the lock free) is committed inline, in its
caller's step: a batch flushed a turn later could hold nothing more (writes queued by the callbacks of later
turns come after the flush), and the deferral cost two loop turns per write, which is most of a lone call's
wait (docs/benchmarks.md, c=1)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any, Generic, TypeVar

from flux7.shared.store.db import Database

__all__ = ["GroupCommit", "SummedUpserts", "UpsertSums", "multi_row_sql"]

Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_BATCH = 256  # rows per transaction: bounds a transaction's length and the statements' parameter counts


class GroupCommit(Generic[Item, Result]):
    """`await submit(item)`: the item written by `apply(conn, items)` in one transaction with the items other
    coroutines of this event loop submitted in the same turn. `apply` returns one result per item, in order."""

    def __init__(
        self, db: Database, apply: Callable[[Any, Sequence[Item]], list[Result]], *, row_lock: str = ""
    ) -> None:
        self.db = db
        self.row_lock = row_lock  # the write's lock on PostgreSQL (see Database.write); nothing on SQLite
        self._apply = apply
        # Per event loop (a process normally runs one; a test may run several, each in its own thread).
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[Item, asyncio.Future[Result]]]] = {}
        # How many batches and rows were committed: what the bench and the tests read to see batching happen.
        self.batches = 0
        self.rows = 0
        self.inline = 0  # batches written in their caller's step (nothing else was ready), refused ones included
        self.waited = 0  # flushes that found another process writing and waited for the lock off the loop

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        queue = self._pending.get(loop)
        if queue is None and _nothing_ready(loop) and self.db.try_write_lock():
            # Alone in its turn: the batch a deferred flush would commit is this item alone. A failure raises here.
            self.inline += 1
            return self._write([item])[0]
        future: asyncio.Future[Result] = loop.create_future()
        if queue is None:
            queue = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        queue.append((item, future))
        # A cancelled caller leaves its item queued: its write still happens, as a lone write begun would.
        return await future

    def queued(self) -> int:
        """Items not committed yet, over every event loop."""
        return sum(len(q) for q in list(self._pending.values()))

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.db.try_write_lock():
            # Another process is writing: wait for the lock on a helper thread, not on this loop, which keeps
            # serving meanwhile; the writes queued until the lock is ours join this batch.
            self.waited += 1
            self.db.wait_write_lock(partial(loop.call_soon_threadsafe, self._flush_locked, loop))
            return
        self._flush_locked(loop)

    def _flush_locked(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop, [])
        if not batch:
            self.db.release_write_lock()
        for i in range(0, len(batch), MAX_BATCH):
            self._commit(batch[i : i + MAX_BATCH])

    def _write(self, items: list[Item]) -> list[Result]:
        with self.db.write(row_lock=self.row_lock) as conn:
            results = self._apply(conn, items)
        self.batches += 1
        self.rows += len(items)
        return results

    def _commit(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = self._write([item for item, _ in batch])
        except Exception as e:  # every caller of the batch gets it
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():  # its caller was cancelled
                future.set_result(result)


def _nothing_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no callback that could queue a write is left to run in this loop turn nor queued for the next
    (asyncio's own loop: its `_ready` queue). The one callback allowed is the loop's own draining of its wake-up
    pipe, which a callback handed over from another thread (granian's I/O threads) leaves behind it. Another
    loop (uvloop) does not say: its writes are always deferred to the next turn."""
    ready = getattr(loop, "_ready", None)
    if ready is None:
        return False
    if not ready:
        return True
    drain = getattr(loop, "_read_from_self", None)
    return drain is not None and all(getattr(h, "_callback", None) == drain for h in ready)


class SummedUpserts:
    """The batch's connection as the calls' own hooks see it (their metrics, their rate-limit counts): the
    `executemany` of an additive upsert (`... VALUES (?, ?, ?) ON CONFLICT ... value = value + excluded.value`)
    is summed per key over the batch and written as one statement at the end, a last-wins upsert likewise;
    everything else goes to the connection as it comes. The sums land in the same transaction (a metric written
    directly, by a worker not holding its series, moves in the commit of the write it counts)."""

    def __init__(self, conn: Any, *, add: str, put: str) -> None:
        self.conn = conn
        self.sums = UpsertSums(add=add, put=put)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        if sql == self.sums.add_sql:
            self.sums.add(rows)
            return None
        if sql == self.sums.put_sql:
            self.sums.put(rows)
            return None
        return self.conn.executemany(sql, rows)

    def flush(self) -> None:
        """Write the sums: one statement for the additive upserts, one for the last-wins ones."""
        self.sums.write(self.conn)
        self.sums = UpsertSums(add=self.sums.add_sql, put=self.sums.put_sql)


class UpsertSums:
    """Rows of an additive upsert summed per key and rows of a last-wins upsert kept per key, until `write` puts
    each kind in one statement: what SummedUpserts gathers over a batch, and what a serving worker's metrics hold
    between their writes (shared/metrics.py)."""

    def __init__(self, *, add: str, put: str) -> None:
        self.add_sql, self.put_sql = add, put
        self.added: dict[tuple[Any, Any], float] = {}
        self.last: dict[tuple[Any, Any], float] = {}

    def __bool__(self) -> bool:
        return bool(self.added or self.last)

    def add(self, rows: Any) -> None:
        added = self.added
        for name, labels, value in rows:
            added[(name, labels)] = added.get((name, labels), 0.0) + value

    def put(self, rows: Any) -> None:
        for name, labels, value in rows:
            self.last.pop((name, labels), None)  # last wins, in order
            self.last[(name, labels)] = value

    def then(self, newer: UpsertSums) -> None:
        """Take in what was gathered after these rows: additions summed, newer values winning."""
        self.add([(*k, v) for k, v in newer.added.items()])
        self.put([(*k, v) for k, v in newer.last.items()])

    def write(self, conn: Any) -> None:
        for sql, rows in ((self.add_sql, self.added), (self.put_sql, self.last)):
            if rows:
                # In key order, as metrics.py writes them: concurrent writers on PostgreSQL lock rows in one order.
                _upsert_all(conn, sql, [(k[0], k[1], v) for k, v in sorted(rows.items())])


_ROW = " VALUES (?, ?, ?)"
_CHUNK = 300  # rows per statement, well under SQLite's bound on parameters


def _upsert_all(conn: Any, sql: str, rows: list[tuple[Any, Any, float]]) -> None:
    head, sep, tail = sql.partition(_ROW)
    if not sep:  # not the shape this merges: row by row
        conn.executemany(sql, rows)
        return
    for i in range(0, len(rows), _CHUNK):
        part = rows[i : i + _CHUNK]
        conn.execute(multi_row_sql(f"{head} VALUES ", 3, len(part), tail), [x for row in part for x in row])


@lru_cache(maxsize=1024)
def multi_row_sql(head: str, width: int, count: int, tail: str = "") -> str:
    """`head`, then `count` rows of `width` parameters, then `tail`: a batch statement's text, built once per
    shape instead of on every write."""
    mark = "(" + ", ".join("?" * width) + ")"
    return head + ", ".join([mark] * count) + tail
