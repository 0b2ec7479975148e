"""The store seam: `Database(target)` opens SQLite (a path, the default) or PostgreSQL (a `postgresql://` URL).

Both engines offer the same surface: `write()` (one transaction, committed when the block ends), `reader`,
`query`/`query_one`/`execute`, `migrate()`, and the dialect helpers below for the few places where their SQL
differs. Call sites write SQLite-flavoured SQL with `?` placeholders; the PostgreSQL engine translates them.
This file holds the base and the SQLite engine (one write path per process, BEGIN IMMEDIATE, separate read
connections); shared/store/postgresql.py holds the PostgreSQL one."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from flux7.shared.errors import Unavailable
from flux7.shared.paths import MIGRATIONS_DIR
from flux7.shared.store.private_files import private_dir, private_file

try:  # a recent SQLite (FTS5 trigram, RETURNING, ...) where the wheel exists
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover - platform without the wheel
    import sqlite3

log = logging.getLogger("flux7.db")

__all__ = [
    "MIGRATIONS_DIR",
    "Connection",
    "Cursor",
    "Database",
    "SqliteDatabase",
    "database_for",
    "is_postgresql_url",
    "sqlite3",
]


class Cursor(Protocol):
    """What `Connection.execute` answers on both engines: rows by index or by column name."""

    rowcount: int
    lastrowid: int | None  # SQLite only; PostgreSQL writes `INSERT … RETURNING id`

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The connection a `Database.write()` block gets, on either engine: SQLite-flavoured SQL, `?` placeholders."""

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, seq: Iterable[Any], /) -> Cursor: ...


# The longest a write waits for a lock held outside this deployment's writer queue (which the flock orders).
BUSY_TIMEOUT_MS = 5000
WRITE_PROBE_SECONDS = 0.25  # /health: a write lock held longer than this by another program is a fault
# A connection that writes only now and then (a CLI command, a reader) checkpoints at SQLite's own threshold.
WAL_AUTOCHECKPOINT_PAGES = 4000
# The store's writer never checkpoints inside a commit: a checkpoint fsyncs the WAL and the database file, which
# took up to 59 ms on the development machine, and a commit runs on the event loop, where every call of the
# worker waited for it. Every this many commits a thread of the store checkpoints instead (docs/benchmarks.md).
CHECKPOINT_EVERY_COMMITS = 400

Row = sqlite3.Row
IntegrityError = sqlite3.IntegrityError


def _configure(conn: Any) -> None:
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode survives a process kill (the WAL lives in the OS page cache); only power loss can
    # drop the last transactions, which Litestream covers.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    # A checkpoint costs an fsync plus every distinct page since the last one; at 4,000 pages (a WAL up to 16 MB)
    # the pages rewritten every time (chain head, index tails, metrics) are copied once per checkpoint. Commits
    # stay as durable: WAL with synchronous=NORMAL either way. The store's own writer turns this off and
    # leaves checkpoints to its checkpoint thread (SqliteDatabase).
    conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")


def is_postgresql_url(target: str | Path) -> bool:
    """A `database` setting naming PostgreSQL (`postgresql://…` or `postgres://…`) rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


class Database:
    """The store seam. `Database(target)` picks the engine from the target: a `postgresql://` URL opens
    PostgreSQL (shared/store/postgresql.py), anything else is a SQLite file path.

    `local_path` (PostgreSQL only) is where this instance keeps node-local files (lock files, generated keys):
    the SQLite file's path plays that part for SQLite."""

    engine = "sqlite"
    # Appended to a SELECT whose rows the transaction goes on to update: PostgreSQL locks them (SQLite's one
    # writer already excludes every other).
    for_update = ""
    # Rows after the first `?` ones (a LIMIT is required before OFFSET in SQLite).
    offset_sql = "LIMIT -1 OFFSET ?"
    path: str  # the SQLite file; for PostgreSQL the local anchor path (storage_path) beside which local files live

    def __new__(cls, target: str | Path, *, migrate: bool = True, local_path: str | Path | None = None) -> Database:
        if cls is Database:
            if is_postgresql_url(target):
                from flux7.shared.store.postgresql import PostgresDatabase

                cls = PostgresDatabase
            else:
                cls = SqliteDatabase
        return object.__new__(cls)

    # -- the surface both engines implement (SqliteDatabase below, PostgresDatabase) --------------------------

    @property
    def label(self) -> str:
        """What messages call this store: the file, or the URL without its password."""
        return self.path

    @property
    def reader(self) -> Any:
        raise NotImplementedError

    def write(self, *, row_lock: str = "") -> contextlib.AbstractContextManager[Any]:
        """A write transaction. `row_lock` names a one-row table (id = 1) the transaction serialises on
        instead of the store-wide write lock (PostgreSQL; SQLite has one writer whatever is asked)."""
        raise NotImplementedError

    def write_blocked(self) -> bool:
        """Whether another program holds the store's write lock for long (what /health reports as degraded)."""
        return False

    def try_write_lock(self) -> bool:
        """Take the deployment's write lock if no other process holds it, without waiting: True when this process
        holds it (the next `write()` takes it as its own and releases it). What lets an event loop keep serving
        while another process writes (`wait_write_lock`). Stores without a process-wide lock: always True."""
        return True

    def wait_write_lock(self, then: Callable[[], object]) -> None:
        """Wait for the write lock on a helper thread, then call `then` (on that thread) with it held."""
        then()

    def release_write_lock(self) -> None:
        """Give back a lock `try_write_lock` or `wait_write_lock` took when no `write()` followed."""

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[Any]:
        return list(self.reader.execute(sql, params).fetchall())

    def query_one(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> Any | None:
        return self.reader.execute(sql, params).fetchone()

    def execute(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> int:
        """One statement in its own write transaction; returns the affected row count."""
        with self.write() as conn:
            return int(conn.execute(sql, params).rowcount)

    def migrate(self, directory: Path = MIGRATIONS_DIR) -> list[str]:
        """Apply numbered `NNNN_name.sql` files not yet applied, in order. Returns the names applied."""
        raise NotImplementedError

    def trace_statements(self, callback: Callable[[str], None] | None) -> None:
        """Hand every statement a write runs (BEGIN and COMMIT included) to `callback` (None stops): what the
        tests count to keep a governed call's statements and commits in budget."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- change notification across instances (PostgreSQL LISTEN/NOTIFY; SQLite's processes poll instead) ------

    def notify(self, conn: Any, channel: str, payload: str) -> None:
        """Tell every instance listening on `channel`, when the transaction of `conn` commits. SQLite: nothing
        (one machine's processes poll the rows)."""

    def listen(self, channel: str, handler: Callable[[str], None]) -> bool:
        """Call `handler(payload)` (on another thread) for every notification on `channel`. False when the
        engine has no notifications (SQLite): the caller polls."""
        return False

    @property
    def listening(self) -> bool:
        """Whether notifications arrive now; polling is the fallback while they do not."""
        return False

    # -- dialect: the SQL that differs between engines, named once here ---------------------------------------

    def utc_now_sql(self) -> str:
        """An SQL expression for the current UTC time as ISO 8601 text (`2026-01-02T03:04:05Z`)."""
        return "strftime('%Y-%m-%dT%H:%M:%SZ')"

    def greatest(self, a: str, b: str) -> str:
        """The larger of two SQL expressions (SQLite's two-argument max, PostgreSQL's GREATEST)."""
        return f"max({a}, {b})"

    def has_table(self, name: str) -> bool:
        return self.query_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) is not None

    def json_array_distinct(self, column: str) -> str:
        """An aggregate: the column's distinct values as JSON array text."""
        return f"json_group_array(DISTINCT {column})"

    def json_number(self, document: str, key: str) -> str:
        """The number at a top-level key of a JSON document held as text or bytes (NULL when absent)."""
        return f"json_extract(CAST({document} AS TEXT), '$.{key}')"

    def is_integrity_error(self, e: BaseException) -> bool:
        """A unique, primary-key, check or foreign-key violation."""
        return isinstance(e, sqlite3.IntegrityError)

    def is_error(self, e: BaseException) -> bool:
        """Any error the engine raised (a driver error, as opposed to a bug in the caller)."""
        return isinstance(e, sqlite3.Error)


def database_for(settings: Any, *, migrate: bool = True) -> Database:
    """The store a Settings names: its `database` URL (PostgreSQL), else the SQLite file at storage_path."""
    local = settings.resolve_path(settings.storage_path)
    if settings.database:
        return Database(settings.database, migrate=migrate, local_path=local)
    return Database(local, migrate=migrate)


class SqliteDatabase(Database):
    """A SQLite file shared by every worker and process of one deployment.

    Writes go through `write()`, serialised in-process by a lock and across processes by `BEGIN IMMEDIATE`.
    Reads use a per-thread connection so they never wait on the writer.
    """

    def __init__(self, path: str | Path, *, migrate: bool = True, local_path: str | Path | None = None) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            private_dir(Path(self.path).parent)
            private_file(self.path)
        self._write_lock = threading.RLock()
        # Writers of every process queue on an flock first: the kernel wakes the next one the moment the lock is
        # free, where SQLite's own busy handler would sleep 1, 2, 5, 10... ms between retries.
        self._lock_fd = -1
        if self.path != ":memory:":
            self._lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._writer = self._connect()
        if self._lock_fd >= 0:
            self._writer.execute("PRAGMA wal_autocheckpoint=0")  # the checkpoint thread's work (see write())
        self.checkpoint_every = CHECKPOINT_EVERY_COMMITS
        self._commits = 0  # since the last checkpoint asked for
        self._checkpointer: _Checkpointer | None = None  # started at the first checkpoint asked for
        self._local = threading.local()
        self._waiter: _LockWaiter | None = None  # started at the first write that finds the lock taken
        self._waiter_guard = threading.Lock()
        # Set once a write waited the whole busy_timeout for a lock another program holds: until a write gets
        # the lock again, writes try without waiting, so a locked store answers 503 at once instead of stalling
        # every request of this process 5 s in turn. The first write after the lock is released clears it.
        self._locked_out = False
        if migrate:
            self.migrate()

    def _connect(self) -> Any:
        # The trace batch writes one multi-row statement per batch size, so a busy mesh uses well over the default
        # 128 prepared statements; past the cache every statement would be prepared again (15-25 µs each).
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, cached_statements=1024)
        _configure(conn)
        return conn

    @property
    def reader(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def trace_statements(self, callback: Callable[[str], None] | None) -> None:
        """Hand every statement the write connection runs to `callback` (None stops): what the tests count to
        keep a governed call's statements and commits in budget."""
        self._writer.set_trace_callback(callback)

    def write_blocked(self, wait_seconds: float = WRITE_PROBE_SECONDS) -> bool:
        """A probe on a connection of its own: can a write transaction begin within `wait_seconds`? Longer than
        any write of this deployment's own holds the lock, so a busy mesh is not reported; a program holding the
        lock (a shell's open transaction, a copy tool) is."""
        if self._locked_out:
            return True
        if self.path == ":memory:":
            return False
        probe = sqlite3.connect(self.path, timeout=wait_seconds, isolation_level=None, check_same_thread=False)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError as e:
            if _is_busy(e):
                return True
            raise
        finally:
            probe.close()
        return False

    def try_write_lock(self) -> bool:
        if self._lock_fd < 0:
            return True
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def wait_write_lock(self, then: Callable[[], object]) -> None:
        if self._lock_fd < 0:
            then()
            return
        with self._waiter_guard:
            if self._waiter is None:
                self._waiter = _LockWaiter(self._lock_fd)
        self._waiter.requests.put(then)

    def release_write_lock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def write(self, *, row_lock: str = "") -> Iterator[Any]:
        """A write transaction; committed before the block's caller sees its result."""
        with self._write_lock:
            if self._lock_fd >= 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                conn = self._writer
                self._begin(conn)
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                else:
                    conn.execute("COMMIT")
                    self._commits += 1
                    if self._commits >= self.checkpoint_every and self._lock_fd >= 0:
                        self._commits = 0
                        self._ask_checkpoint()
            finally:
                if self._lock_fd >= 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _ask_checkpoint(self) -> None:
        checkpointer = self._checkpointer
        if checkpointer is None or checkpointer.pid != os.getpid():  # none yet, or inherited across a fork
            checkpointer = self._checkpointer = _Checkpointer(self.path)
        checkpointer.ask()

    @property
    def checkpoints(self) -> int:
        """Checkpoints the store's checkpoint thread ran (what the tests wait on)."""
        return self._checkpointer.done if self._checkpointer is not None else 0

    def _begin(self, conn: Any) -> None:
        locked_out = self._locked_out
        if locked_out:
            conn.execute("PRAGMA busy_timeout=0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if not _is_busy(e):
                raise
            # Another program holds the write lock past busy_timeout: a bounded wait, then a typed refusal (503)
            # that no caller mistakes for a bug.
            self._locked_out = True
            raise Unavailable(f"storage unavailable: {self.path} is locked by another process") from e
        finally:
            if locked_out:
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._locked_out = False

    def migrate(self, directory: Path = MIGRATIONS_DIR) -> list[str]:
        """Apply numbered `NNNN_name.sql` files not yet applied, in order. Returns the names applied."""
        applied: list[str] = []
        with self.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
            for file in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql")):
                if file.name in done:
                    continue
                for statement in _split_sql(file.read_text()):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, strftime('%Y-%m-%dT%H:%M:%SZ'))",
                    (file.name,),
                )
                applied.append(file.name)
        return applied

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        if self._checkpointer is not None:
            self._checkpointer.stop()
        if self._waiter is not None:
            self._waiter.requests.put(None)
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = -1
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class _LockWaiter:
    """One daemon thread per store that blocks on the flock for callers who must not (an event loop), and calls
    each request's callback once the lock is held. A lock is only ever a queue here: SQLite's own lock still
    guards every transaction, so a lock given back early (another write of this process ending first) costs a
    wait, never a wrong write."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.requests: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="flux7-write-lock", daemon=True).start()

    def _run(self) -> None:
        while (then := self.requests.get()) is not None:  # None: the store closed
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                then()
            except Exception:  # no one will write with it (the loop closed): give it back, or the others wait forever
                with contextlib.suppress(OSError):
                    fcntl.flock(self.fd, fcntl.LOCK_UN)


class _Checkpointer:
    """One daemon thread per store that checkpoints the WAL into the database file when asked, off the writer's
    thread (an event loop). It takes the deployment's write lock first, through its own open file description
    (so this process's writers wait too, not only the others'): with no commit in between, the checkpoint
    copies every frame and the next write starts the WAL over, so it cannot grow without bound under steady
    writes. Writers meanwhile wait for the lock, the event loop's off the loop (shared/store/group_commit.py)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.done = 0
        self._asked = threading.Event()
        self._stopping = False
        threading.Thread(target=self._run, name="flux7-checkpoint", daemon=True).start()

    def ask(self) -> None:
        self._asked.set()  # asks made while one runs fold into the next

    def stop(self) -> None:
        self._stopping = True
        self._asked.set()

    def _run(self) -> None:
        lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        conn: Any = None
        try:
            while True:
                self._asked.wait()
                self._asked.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                        _configure(conn)
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                    try:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    finally:
                        fcntl.flock(lock_fd, fcntl.LOCK_UN)
                    self.done += 1
                except Exception:  # the next ask tries again; commits are durable in the WAL meanwhile
                    log.exception("checkpoint of %s failed", self.path)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            os.close(lock_fd)


def _is_busy(e: Exception) -> bool:
    text = str(e).lower()
    return "locked" in text or "busy" in text


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN ... END;) whole."""
    statements: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--") and not buf.strip():
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
    if buf.strip():
        statements.append(buf.strip())
    return statements
