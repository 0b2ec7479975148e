"""Group commit: the writes of concurrent calls committed together, one transaction for a batch.

One writer thread per committer drains what the calls queued while it was busy and runs it in one
`Database.write()` (BEGIN IMMEDIATE ... COMMIT: the flock still orders the processes of a deployment, each
process batches its own). A caller awaits its own result, which is set only after COMMIT returned: nothing is
answered before its row is durable. A batch that fails (the store locked, a statement refused, COMMIT) fails every
caller in it with the same exception, and each of them refuses its call as a lone write would have.

The thread is started on the first write and ends after a second idle, so a process that stops writing (or a
test's mesh that is gone) keeps no thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .db import Database

__all__ = ["GroupCommit"]

Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_BATCH = 256  # rows per transaction: bounds a transaction's length and the statements' parameter counts
IDLE_SECONDS = 1.0  # the writer thread ends after this long without a write

_Waiter = tuple[Any, "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class GroupCommit(Generic[Item, Result]):
    """`await submit(item)`: the item written by `apply(conn, items)` in one transaction with the items other
    coroutines submitted meanwhile. `apply` returns one result per item, in order."""

    def __init__(self, db: Database, apply: Callable[[Any, Sequence[Item]], list[Result]], name: str) -> None:
        self.db = db
        self._apply = apply
        self._name = name
        self._cond = threading.Condition()
        self._pending: list[_Waiter] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._committing = 0
        # How many batches and rows were committed: what the bench and the tests read to see batching happen.
        self.batches = 0
        self.rows = 0

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        with self._cond:
            self._closed = False  # a write after close() starts the thread again
            self._pending.append((item, future, loop))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
        # A cancelled caller leaves its item queued: its write still happens, as a lone write begun would.
        return await future

    def queued(self) -> int:
        """Items not committed yet: waiting for the writer thread, or in the batch it is committing."""
        with self._cond:
            return len(self._pending) + self._committing

    def close(self) -> None:
        """Write what is queued and let the thread end (it also ends by itself when idle); a later write
        starts it again."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    idle = self._closed or not self._cond.wait(timeout=IDLE_SECONDS)
                    if idle and not self._pending:
                        self._thread = None
                        return
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
                self._committing = len(batch)
            self._commit(batch)
            with self._cond:
                self._committing = 0

    def _commit(self, batch: list[_Waiter]) -> None:
        results: list[Any] = []
        error: BaseException | None = None
        try:
            with self.db.write() as conn:
                results = self._apply(conn, [item for item, _, _ in batch])
            self.batches += 1
            self.rows += len(batch)
        except BaseException as e:  # every caller of the batch gets it; this thread goes on
            error = e
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
        for i, (_, future, loop) in enumerate(batch):
            by_loop.setdefault(loop, []).append((future, results[i] if error is None else None))
        for loop, settled in by_loop.items():
            # One wake-up of the event loop per batch, not per row.
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, settled, error)


def _settle(settled: list[tuple[asyncio.Future[Any], Any]], error: BaseException | None) -> None:
    for future, result in settled:
        if future.done():  # its caller was cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class SummedUpserts:
    """The batch's connection as the calls' own hooks see it (their metrics, their rate-limit counts): the
    `executemany` of an additive upsert (`... VALUES (?, ?, ?) ON CONFLICT ... value = value + excluded.value`)
    is summed per key over the batch and written as one statement at the end, a last-wins upsert likewise;
    everything else goes to the connection as it comes. The sums land in the same transaction, so a metric
    still moves in the commit of the write it counts."""

    def __init__(self, conn: Any, *, add: str, put: str) -> None:
        self.conn = conn
        self._add_sql, self._put_sql = add, put
        self._added: dict[tuple[Any, Any], float] = {}
        self._put: dict[tuple[Any, Any], float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        if sql == self._add_sql:
            for name, labels, value in rows:
                self._added[(name, labels)] = self._added.get((name, labels), 0.0) + value
            return None
        if sql == self._put_sql:
            for name, labels, value in rows:
                self._put.pop((name, labels), None)  # last wins, in order
                self._put[(name, labels)] = value
            return None
        return self.conn.executemany(sql, rows)

    def flush(self) -> None:
        """Write the sums: one statement for the additive upserts, one for the last-wins ones."""
        for sql, rows in ((self._add_sql, self._added), (self._put_sql, self._put)):
            if rows:
                _upsert_all(self.conn, sql, [(k[0], k[1], v) for k, v in rows.items()])
            rows.clear()


_ROW = " VALUES (?, ?, ?)"
_CHUNK = 300  # rows per statement, well under SQLite's bound on parameters


def _upsert_all(conn: Any, sql: str, rows: list[tuple[Any, Any, float]]) -> None:
    head, sep, tail = sql.partition(_ROW)
    if not sep:  # not the shape this merges: row by row
        conn.executemany(sql, rows)
        return
    for i in range(0, len(rows), _CHUNK):
        part = rows[i : i + _CHUNK]
        values = ", ".join("(?, ?, ?)" for _ in part)
        conn.execute(f"{head} VALUES {values}{tail}", [x for row in part for x in row])
