"""The PostgreSQL engine of the store seam (shared/store/db.py `Database`): psycopg 3 over a psycopg_pool pool.

Call sites write the SQL both engines accept, with `?` placeholders (translated here) and rows read by index or
by column name, as sqlite3.Row allows. A write transaction takes a transaction-scoped advisory lock first, so
writes are serialised across every process and instance exactly as SQLite's one writer serialises them, and
the read-modify-write code written for SQLite stays correct; a write that names `row_lock` (the trace chain)
serialises on that row (`SELECT … FOR UPDATE`) instead, and runs alongside the others."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

from flux7.shared.errors import BadRequest, Unavailable
from flux7.shared.store.db import MIGRATIONS_DIR, Database
from flux7.shared.store.notify import Listener
from flux7.shared.store.translate import translate

__all__ = ["PG_MIGRATIONS_DIR", "PostgresDatabase", "Row"]

PG_MIGRATIONS_DIR = MIGRATIONS_DIR / "postgresql"
# Advisory lock keys (one 64-bit space per database): every serialised write, and the migration run.
WRITE_LOCK = 0x466C757837_01
MIGRATE_LOCK = 0x466C757837_02
# How long a request waits for a pooled connection before answering 503.
POOL_TIMEOUT_S = 10.0
_ROW_LOCK_TABLE = re.compile(r"^[a-z_][a-z0-9_]*$")


class Row(tuple[Any, ...]):
    """A result row read by index or by column name, like sqlite3.Row (`dict(row)` works too)."""

    _index: dict[str, int]

    def __new__(cls, values: Sequence[Any], index: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._index[key])
            except KeyError:
                raise IndexError(f"no such column: {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _rows(cursor: Any) -> RowMaker[Row]:
    names = [d.name for d in cursor.description or ()]
    index = {name: i for i, name in enumerate(names)}

    def make(values: Sequence[Any]) -> Row:
        return Row(values, index)

    return make


class _NumericLoader(Loader):
    """numeric (what SUM and AVG of integers give) as int when whole, else float: never Decimal, as SQLite."""

    def load(self, data: Any) -> Any:
        text = bytes(data).decode()
        if text in ("NaN", "Infinity", "-Infinity"):
            return float(text)
        return float(text) if "." in text or "e" in text or "E" in text else int(text)


class _BoolAsIntDumper(Dumper):
    """Python booleans go into INTEGER 0/1 columns, as sqlite3 stores them."""

    format = Format.TEXT
    oid = 20  # int8

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_loader("numeric", _NumericLoader)
    conn.adapters.register_dumper(bool, _BoolAsIntDumper)
    conn.row_factory = _rows


class Result:
    """What `execute` returns: a cursor's rows already fetched (the connection goes back to the pool)."""

    def __init__(self, rows: list[Row], rowcount: int) -> None:
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount
        self.lastrowid = None  # PostgreSQL has none: write `INSERT … RETURNING id`

    def fetchone(self) -> Row | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[Row]:
        rest = self._rows[self._next :]
        self._next = len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


@contextlib.contextmanager
def _refusing_nul() -> Iterator[None]:
    """PostgreSQL text holds no NUL character (SQLite's does): input carrying one is the caller's 400, not a 500."""
    try:
        yield
    except psycopg.DataError as e:
        if "NUL" in str(e):
            raise BadRequest("text cannot contain NUL (0x00) characters") from e
        raise


def _run(conn: psycopg.Connection[Any], sql: str, params: Any) -> Result:
    named = isinstance(params, dict)
    query = translate(sql, named) if params else sql
    with _refusing_nul():
        cur = conn.execute(query, params if params else None)
    rows = cur.fetchall() if cur.description is not None else []
    return Result(rows, cur.rowcount)


class Connection:
    """The connection a `write()` block gets: `execute`/`executemany` with `?` placeholders."""

    def __init__(self, conn: psycopg.Connection[Any], trace: Callable[[str], None] | None = None) -> None:
        self.raw = conn
        self._trace = trace

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Result:
        if self._trace is not None:
            self._trace(sql)
        return _run(self.raw, sql, params)

    def executemany(self, sql: str, seq: Any) -> Result:
        if self._trace is not None:
            self._trace(sql)
        items = list(seq)
        if not items:
            return Result([], 0)
        named = isinstance(items[0], dict)
        with self.raw.cursor() as cur, _refusing_nul():
            cur.executemany(translate(sql, named), items)
            return Result([], cur.rowcount)


class _Reader:
    """`db.reader`: each statement on a pooled connection in autocommit mode (it sees every commit)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Result:
        with self._db.connection() as conn:
            return _run(conn, sql, params)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class PostgresDatabase(Database):
    """One PostgreSQL database shared by every worker of every instance of a deployment."""

    engine = "postgresql"
    for_update = " FOR UPDATE"
    offset_sql = "OFFSET ?"

    def __init__(
        self,
        url: str | Path,
        *,
        migrate: bool = True,
        local_path: str | Path | None = None,
        max_connections: int = 10,
    ) -> None:
        self.url = str(url)
        self._trace: Callable[[str], None] | None = None
        self.path = str(local_path) if local_path else str(Path.cwd() / "flux7.db")
        self._closed = threading.Event()
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            configure=_configure,
            timeout=POOL_TIMEOUT_S,
            open=False,
            name="flux7",
        )
        try:
            self._pool.open(wait=True, timeout=POOL_TIMEOUT_S)
        except PoolTimeout as e:
            self._pool.close()
            raise Unavailable(f"storage unavailable: cannot connect to {self.label}") from e
        self._reader = _Reader(self)
        self._listener = Listener(self.url)
        if migrate:
            self.migrate()

    @property
    def label(self) -> str:
        return redact(self.url)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit); a database that cannot be reached is a typed 503, not a crash."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as e:
            raise Unavailable(f"storage unavailable: no connection to {self.label}") from e
        except psycopg.OperationalError as e:
            raise Unavailable(f"storage unavailable: {self.label}: {e}") from e

    @property
    def reader(self) -> Any:
        return self._reader

    @contextlib.contextmanager
    def write(self, *, row_lock: str = "") -> Iterator[Any]:
        """A write transaction, committed when the block ends. Serialised with every other write of the
        deployment (an advisory lock held to commit), or on `row_lock`'s row (id = 1) when it is named."""
        trace = self._trace
        with self.connection() as conn:
            with conn.transaction():
                if trace is not None:
                    trace("BEGIN")
                if row_lock:
                    if not _ROW_LOCK_TABLE.fullmatch(row_lock):
                        raise ValueError(f"row_lock: not a table name: {row_lock!r}")
                    lock = f"SELECT 1 FROM {row_lock} WHERE id = 1 FOR UPDATE"
                    if trace is not None:
                        trace(lock)
                    conn.execute(lock)
                else:
                    if trace is not None:
                        trace("SELECT pg_advisory_xact_lock(?)")
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                yield Connection(conn, trace)
            if trace is not None:
                trace("COMMIT")

    def trace_statements(self, callback: Callable[[str], None] | None) -> None:
        """Hand every statement a write transaction runs (BEGIN, the lock, COMMIT included) to `callback` (None
        stops), as the SQLite engine does: what the tests count to keep a governed call's writes in budget."""
        self._trace = callback

    def migrate(self, directory: Path = PG_MIGRATIONS_DIR) -> list[str]:
        """Apply numbered `NNNN_name.sql` files not yet applied, in order, under a session advisory lock: of
        several instances starting at once, one applies each file and the others find it done."""
        if directory == MIGRATIONS_DIR:  # the SQLite folder: this engine's files live beside it
            directory = PG_MIGRATIONS_DIR
        applied: list[str] = []
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
                )
                done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations").fetchall()}
                for file in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql")):
                    if file.name in done:
                        continue
                    with conn.transaction():
                        conn.execute(file.read_text().encode())  # no parameters: several statements at once
                        conn.execute(
                            "INSERT INTO schema_migrations (name, applied_at) VALUES (%s, "
                            + self.utc_now_sql().replace("%", "%%")
                            + ")",
                            (file.name,),
                        )
                    applied.append(file.name)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
        return applied

    def server_status(self) -> dict[str, Any]:
        """What `flux7 doctor` reports: the server's version, the migrations applied, whether pgvector is
        installed, and this machine's clock against the server's (instances compare times they each wrote)."""
        before = time.time()
        row = self.query_one("SELECT current_setting('server_version'), extract(epoch FROM clock_timestamp())")
        after = time.time()
        assert row is not None
        applied = (
            {str(r[0]) for r in self.query("SELECT name FROM schema_migrations")}
            if self.has_table("schema_migrations")
            else set()
        )
        vector = self.query_one("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        return {
            "version": str(row[0]),
            "migrations": applied,
            "pgvector": str(vector[0]) if vector else "",
            "clock_skew_s": float(row[1]) - (before + after) / 2,
        }

    def notify(self, conn: Any, channel: str, payload: str) -> None:
        """NOTIFY inside the write transaction of `conn`: delivered at commit, never for a rollback."""
        conn.execute("SELECT pg_notify(?, ?)", (channel, payload))

    def listen(self, channel: str, handler: Callable[[str], None]) -> bool:
        self._listener.subscribe(channel, handler)
        return True

    @property
    def listening(self) -> bool:
        return self._listener.alive

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._listener.close()
            with contextlib.suppress(Exception):
                self._pool.close()

    # -- dialect ------------------------------------------------------------------------------------------------

    def utc_now_sql(self) -> str:
        return "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

    def greatest(self, a: str, b: str) -> str:
        return f"GREATEST({a}, {b})"

    def has_table(self, name: str) -> bool:
        return (
            self.query_one("SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?", (name,))
            is not None
        )

    def json_array_distinct(self, column: str) -> str:
        return f"json_agg(DISTINCT {column})::text"

    def json_number(self, document: str, key: str) -> str:
        # jsonb refuses the escape \u0000 (JSON's NUL), which a call's parameters may hold: it becomes \u0001 first,
        # the same length and as valid wherever it stands (after an escaped backslash it is plain text either way).
        text = f"replace(convert_from({document}, 'UTF8'), '\\u0000', '\\u0001')"
        return f"({text}::jsonb ->> '{key}')::double precision"

    def is_integrity_error(self, e: BaseException) -> bool:
        return isinstance(e, psycopg.IntegrityError)

    def is_error(self, e: BaseException) -> bool:
        return isinstance(e, psycopg.Error)
