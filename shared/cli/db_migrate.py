"""`flux7 db migrate-to postgresql://…`: copy a SQLite deployment into an empty PostgreSQL database, then prove it.

The copy is one PostgreSQL transaction (all of it lands or none of it does; run it again after fixing what failed)
that holds the deployment's write lock, read from one SQLite read snapshot (a server still running on the file
cannot tear it). Both schemas are introspected, so a table a migration adds is copied without a change here:
every SQLite table except SQLite's own and the FTS5 index (PostgreSQL computes its `tsvector` columns itself),
every column of each, values converted to the PostgreSQL column's type, in batches through COPY. Identity
sequences are moved past the copied ids (past SQLite's AUTOINCREMENT high-water mark too, so no id is reused).
`schema_migrations` is not copied but reconciled: the source must have exactly the migrations this flux7 ships
(the target gets its own twins applied). Afterwards the row counts are compared table by table, and the trace
hash chain and the memory journal's chain are verified on PostgreSQL by the code `GET /traces/verify` and
`mem7 verify` use.

Exit status: 0 copied and verified; 1 the copy failed (nothing committed) or does not verify; 2 bad input (not a
postgresql:// URL, an unreachable server, a missing or foreign SQLite file, a target that is not empty, a source
from another flux7 version)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import click
import psycopg
from psycopg import sql

from flux7.shared.cli.config_choice import announce
from flux7.shared.cli.kit import CONTEXT, Fail, run, runtime
from flux7.shared.errors import ConfigError, Flux7Error
from flux7.shared.settings import choose_config, load_settings
from flux7.shared.store.db import MIGRATIONS_DIR, Database, is_postgresql_url, sqlite3

__all__ = ["Migration", "MigrationError", "main", "migrate", "migrate_to"]

BATCH = 5000
_SQLITE_MAGIC = b"SQLite format 3\x00"
# Not copied: the migration record (reconciled instead: each engine records its own files). SQLite's own tables
# are skipped too (sqlite_sequence is read for the id high-water marks).
_NOT_COPIED = {"schema_migrations"}


class MigrationError(Exception):
    """Why the move cannot start (exit 2) or did not hold (exit 1); the message says what to do."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Table:
    name: str
    columns: list[str]  # copied: the SQLite table's columns, less any PostgreSQL computes itself
    types: list[str]  # the PostgreSQL type (udt_name) of each
    rows: int = 0
    single_row: bool = False  # a `CHECK (id = 1)` head or counter, seeded by the migrations
    identity: list[str] = field(default_factory=list)


@dataclass
class Migration:
    """What was copied and what the checks found."""

    source: str
    target: str
    tables: list[Table] = field(default_factory=list)
    copied: dict[str, int] = field(default_factory=dict)
    counted: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    vectors_indexed: int = 0
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(self.copied.values())

    def problems(self) -> list[str]:
        out = [
            f"table {t}: {self.copied.get(t, 0)} rows in SQLite, {self.counted.get(t, 0)} in PostgreSQL"
            for t in self.copied
            if self.counted.get(t) != self.copied[t]
        ]
        if self.trace.get("break"):
            out.append(f"trace chain: {self.trace['break']}")
        if self.memory.get("break"):
            out.append(f"memory chain: {self.memory['break']}")
        return out


# -- the source --------------------------------------------------------------------------------------------------


def _open_source(path: Path) -> Any:
    if not path.exists():
        raise MigrationError(
            f"{path}: no such file (the SQLite database to copy: --from FILE or the config's storage_path)"
        )
    if not path.is_file():
        raise MigrationError(f"{path}: not a file")
    with path.open("rb") as f:
        if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            raise MigrationError(f"{path}: not an SQLite database")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    # One read transaction for the whole copy: every table is read at the same instant, writes of a server still
    # running on the file after it are not half copied.
    conn.execute("BEGIN")
    return conn


def _source_tables(conn: Any) -> tuple[list[str], list[str]]:
    """(tables to copy, tables skipped): SQLite's own and the FTS5 index (virtual tables and their shadows)."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
    virtual = [r[0] for r in rows if (r[1] or "").upper().startswith("CREATE VIRTUAL TABLE")]
    copy, skipped = [], []
    for name, _ in rows:
        derived = name.startswith("sqlite_") or any(name == v or name.startswith(v + "_") for v in virtual)
        if derived:
            skipped.append(name)
        elif name not in _NOT_COPIED:
            copy.append(name)
    return copy, skipped


def _check_migrations(conn: Any, path: Path) -> None:
    shipped = {p.name for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")}
    try:
        applied = {str(r[0]) for r in conn.execute("SELECT name FROM schema_migrations")}
    except sqlite3.Error:
        raise MigrationError(f"{path}: no schema_migrations table: not a flux7 database") from None
    unknown = sorted(applied - shipped)
    if unknown:
        raise MigrationError(
            f"{path} was written by a newer flux7 (migrations this version does not ship: {', '.join(unknown)}); "
            "run migrate-to with that version"
        )
    pending = sorted(shipped - applied)
    if pending:
        raise MigrationError(
            f"{path} was written by an older flux7 ({len(pending)} migration(s) pending: {', '.join(pending)}); "
            "start this version's `flux7 serve` on it once (it applies them), stop it, then migrate"
        )


def _high_water(conn: Any) -> dict[str, int]:
    """AUTOINCREMENT's largest id ever handed out, per table (it may exceed the largest id still present)."""
    try:
        return {str(r[0]): int(r[1]) for r in conn.execute("SELECT name, seq FROM sqlite_sequence")}
    except sqlite3.Error:
        return {}


# -- the target --------------------------------------------------------------------------------------------------


def _redact(url: str) -> str:
    from flux7.shared.store.postgresql import redact

    return redact(url)


def _migrated_target(url: str) -> Database:
    """The target opened (and migrated, under the migration lock) through the store seam."""
    from flux7.shared.store.postgresql import PostgresDatabase

    # One direct connection first: the server's own reason (refused, no such database, bad password) in the
    # message, where the pool would only time out. libpq never repeats the password; the URL is redacted.
    try:
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MigrationError(f"storage unavailable: cannot connect to {_redact(url)}: {reason}") from None
    try:
        db = PostgresDatabase(url, migrate=False)
    except Flux7Error as e:
        raise MigrationError(f"{e}") from None
    try:
        pg_shipped = {p.name for p in (MIGRATIONS_DIR / "postgresql").glob("[0-9][0-9][0-9][0-9]_*.sql")}
        applied = (
            {str(r[0]) for r in db.query("SELECT name FROM schema_migrations")}
            if db.has_table("schema_migrations")
            else set()
        )
        unknown = sorted(applied - pg_shipped)
        if unknown:
            raise MigrationError(
                f"{db.label} was migrated by a newer flux7 (migrations this version does not ship: "
                f"{', '.join(unknown)})"
            )
        db.migrate()
    except BaseException:
        db.close()
        raise
    return db


def _target_columns(cur: Any) -> dict[str, dict[str, tuple[str, bool, bool]]]:
    """table → column → (udt_name, generated, identity), for the current schema."""
    out: dict[str, dict[str, tuple[str, bool, bool]]] = {}
    for table, column, udt, generated, identity in cur.execute(
        "SELECT c.table_name, c.column_name, c.udt_name, c.is_generated, c.is_identity"
        " FROM information_schema.columns c JOIN information_schema.tables t"
        " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
        " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
    ).fetchall():
        out.setdefault(table, {})[column] = (udt, generated == "ALWAYS", identity == "YES")
    return out


def _single_row_tables(cur: Any) -> set[str]:
    rows = cur.execute(
        "SELECT c.conrelid::regclass::text FROM pg_constraint c"
        " WHERE c.contype = 'c' AND c.connamespace = current_schema()::regnamespace"
        " AND pg_get_constraintdef(c.oid) LIKE '%(id = 1)%'"
    ).fetchall()
    return {str(r[0]) for r in rows}


def _foreign_keys(cur: Any) -> list[tuple[str, str]]:
    """(table, the table it references)."""
    rows = cur.execute(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c"
        " WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace"
    ).fetchall()
    return [(str(a), str(b)) for a, b in rows if a != b]


def _order(names: list[str], single: set[str], fks: list[tuple[str, str]]) -> list[str]:
    """Referenced tables before the tables that reference them; the single-row heads and counters last, so that
    triggers fired by copying the others (memory_vectors bumps memory_vectors_version) leave them as in SQLite."""
    ordered: list[str] = []
    pending = sorted(names, key=lambda n: (n in single, n))
    while pending:
        for name in pending:
            if all(ref in ordered or ref not in names for t, ref in fks if t == name):
                ordered.append(name)
                pending.remove(name)
                break
        else:  # a cycle: no migration makes one, but never loop forever
            ordered += pending
            break
    return ordered


def _not_empty(cur: Any, tables: list[Table]) -> list[str]:
    """Tables holding rows; the single-row heads and counters hold the migrations' seed rows and are not counted."""
    found = []
    for name in [t.name for t in tables if not t.single_row]:
        (n,) = cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))).fetchone()
        if n:
            found.append(f"{name} ({n} rows)")
    return found


# -- values ------------------------------------------------------------------------------------------------------

_INTEGER = {"int2", "int4", "int8"}
_FLOAT = {"float4", "float8", "numeric"}


def _converter(table: str, column: str, udt: str) -> Callable[[Any], Any]:
    """SQLite stores what it was given whatever the column's declared type; PostgreSQL takes its column's type."""

    def bad(value: Any) -> MigrationError:
        return MigrationError(f"table {table}, column {column}: {value!r} is not a {udt}", 1)

    def to_int(v: Any) -> Any:
        if v is None or isinstance(v, int):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            return int(v)
        raise bad(v)

    def to_float(v: Any) -> Any:
        if v is None or isinstance(v, int | float):
            return v
        try:
            return float(v)
        except (TypeError, ValueError):
            raise bad(v) from None

    def to_text(v: Any) -> Any:
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, bytes):
            return v.decode("utf-8")
        return str(v)

    def to_bytes(v: Any) -> Any:
        if v is None or isinstance(v, bytes):
            return v
        if isinstance(v, str):
            return v.encode("utf-8", "surrogateescape")
        raise bad(v)

    if udt in _INTEGER:
        return to_int
    if udt in _FLOAT:
        return to_float
    if udt == "bytea":
        return to_bytes
    return to_text


# -- the move ----------------------------------------------------------------------------------------------------


def migrate(
    source: Path,
    url: str,
    *,
    trace_key: bytes | None = None,
    memory_key: bytes = b"",
    batch: int = BATCH,
    progress: Callable[[str, int, int], None] | None = None,
) -> Migration:
    """Copy the SQLite database at `source` into the PostgreSQL database at `url`, then check the copy."""
    if not is_postgresql_url(url):
        scheme = urlsplit(url).scheme
        raise MigrationError(f"not a postgresql:// URL: {scheme + '://…' if scheme else repr(url)}")
    started = time.monotonic()
    lite = _open_source(source)
    try:
        _check_migrations(lite, source)
        names, skipped = _source_tables(lite)
        high_water = _high_water(lite)
        target = _migrated_target(url)
        try:
            result = Migration(source=str(source), target=target.label, skipped=skipped)
            _copy(lite, url, target.label, names, high_water, result, batch, progress)
            _verify(target, result, trace_key, memory_key)
        finally:
            target.close()
    finally:
        lite.close()
    result.seconds = time.monotonic() - started
    return result


def _copy(
    lite: Any,
    url: str,
    label: str,
    names: list[str],
    high_water: dict[str, int],
    result: Migration,
    batch: int,
    progress: Callable[[str, int, int], None] | None,
) -> None:
    from flux7.shared.store.postgresql import WRITE_LOCK

    try:
        conn = psycopg.connect(url, autocommit=False)
    except psycopg.Error as e:
        raise MigrationError(f"storage unavailable: cannot connect to {label}: {e}") from None
    try:
        with conn.transaction(), conn.cursor() as cur:
            # Instances started on the target wait behind the copy instead of writing into a half-copied store.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            tables = _plan(lite, cur, names)
            result.tables = tables
            busy = _not_empty(cur, tables)
            if busy:
                raise MigrationError(
                    f"{label} is not empty: {', '.join(busy)}. migrate-to copies into a new database only: "
                    "create one (createdb, or the provider's console) and run it before any instance starts on it"
                )
            total = sum(t.rows for t in tables)
            done = 0
            for table in tables:
                result.copied[table.name] = table.rows
                if table.rows:
                    # Only the migrations' seed rows can be here (the check above): the source's replace them.
                    cur.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table.name)))
                    for n in _copy_table(lite, cur, table, batch):
                        done += n
                        if progress is not None:
                            progress(table.name, done, total)
                for column in table.identity:  # an emptied table keeps its high-water mark too
                    _advance(cur, table.name, column, high_water.get(table.name, 0))
            if progress is not None:
                progress("", done, total)
    except psycopg.Error as e:
        raise MigrationError(f"the copy failed, nothing was committed: {e}", 1) from None
    except MigrationError as e:
        if e.code == 2:
            raise
        raise MigrationError(f"the copy failed, nothing was committed: {e}", 1) from None
    finally:
        conn.close()


def _plan(lite: Any, cur: Any, names: list[str]) -> list[Table]:
    target = _target_columns(cur)
    single = _single_row_tables(cur)
    tables: dict[str, Table] = {}
    for name in names:
        if name not in target:
            raise MigrationError(f"the target has no table {name}: it was migrated by another flux7 version")
        columns, types, identity = [], [], []
        for info in lite.execute(f'PRAGMA table_info("{name}")').fetchall():
            column = str(info[1])
            if column not in target[name]:
                raise MigrationError(f"the target's table {name} has no column {column}")
            udt, generated, is_identity = target[name][column]
            if generated:
                continue  # PostgreSQL computes it (the memory tsvector columns)
            columns.append(column)
            types.append(udt)
            if is_identity:
                identity.append(column)
        (rows,) = lite.execute(f'SELECT count(*) FROM "{name}"').fetchone()
        tables[name] = Table(name, columns, types, int(rows), name in single, identity)
    return [tables[n] for n in _order(names, single, _foreign_keys(cur))]


def _copy_table(lite: Any, cur: Any, table: Table, batch: int) -> Iterator[int]:
    """COPY the table's rows in batches; yields the count of each batch as it is sent."""
    convert = [_converter(table.name, c, t) for c, t in zip(table.columns, table.types, strict=True)]
    columns = ", ".join(f'"{c}"' for c in table.columns)
    order = " ORDER BY rowid" if _has_rowid(lite, table.name) else ""
    rows = lite.execute(f'SELECT {columns} FROM "{table.name}"{order}')
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table.name), sql.SQL(", ").join(sql.Identifier(c) for c in table.columns)
    )
    with cur.copy(statement) as copy:
        copy.set_types(table.types)
        while True:
            chunk = rows.fetchmany(batch)
            if not chunk:
                break
            for row in chunk:
                copy.write_row([f(v) for f, v in zip(convert, row, strict=True)])
            yield len(chunk)


def _has_rowid(lite: Any, name: str) -> bool:
    try:
        lite.execute(f'SELECT rowid FROM "{name}" LIMIT 0')
        return True
    except sqlite3.Error:  # WITHOUT ROWID
        return False


def _advance(cur: Any, table: str, column: str, high_water: int) -> None:
    """The next id the sequence hands out follows both the largest copied id and SQLite's high-water mark."""
    (sequence,) = cur.execute("SELECT pg_get_serial_sequence(%s, %s)", (table, column)).fetchone()
    if not sequence:
        return
    (largest,) = cur.execute(
        sql.SQL("SELECT coalesce(max({}), 0) FROM {}").format(sql.Identifier(column), sql.Identifier(table))
    ).fetchone()
    last = max(int(largest), high_water)
    if last > 0:
        cur.execute("SELECT setval(%s, %s, true)", (sequence, last))


# -- the proof ---------------------------------------------------------------------------------------------------


def _verify(db: Database, result: Migration, trace_key: bytes | None, memory_key: bytes) -> None:
    from flux7.shared.memory import vectors_pgvector
    from flux7.shared.memory.verify import VerifyRefused, verify_store
    from flux7.shared.tracing.store import TraceStore

    for name in result.copied:
        row = db.query_one(f'SELECT count(*) FROM "{name}"')
        result.counted[name] = int(row[0]) if row else 0

    # The trace chain as `GET /traces/verify` walks it without a trace file: every stored line, then the head.
    store = TraceStore(db, key=trace_key)
    head_seq, head_hash = store.head()
    label = f"{db.label}#trace_lines"
    v = store.verify_stored(label)
    if v.brk is None and v.last_seq < head_seq:
        v.fail_at_end(label, v.lines + 1, f"stored chain ends at seq {v.last_seq}, head is seq {head_seq}")
    if v.brk is None and head_seq and v.head != head_hash:
        v.fail_at_end(label, v.lines, "the last line's hash is not the head recorded in trace_chain")
    result.trace = v.report()
    if v.brk is not None:
        b = v.brk
        result.trace["break"] = f"{b['file']}:{b['line']}: {b['reason']}"

    if result.copied.get("memory_journal"):
        try:
            report = verify_store(db, memory_key)
        except VerifyRefused as e:
            result.memory = {"break": str(e)}
        else:
            result.memory = {"entries": report.entries, "sealed": report.sealed, "keyed": report.keyed}
            if report.brk is not None:
                mb = report.brk
                result.memory["break"] = f"{mb.file}:{mb.line} ({mb.entity}): {mb.reason}"

    # pgvector's column, where the server has the extension: filled now rather than by the first instance.
    if vectors_pgvector.available(db):
        result.vectors_indexed = vectors_pgvector.backfill(db)


# -- the command -------------------------------------------------------------------------------------------------


def _local_files(settings: Any, source: Path) -> list[str]:
    """What lives beside the SQLite file and not in it: what each PostgreSQL instance needs told."""
    from flux7.shared.auth.admin_token import token_file
    from flux7.shared.decisions.signing import KEY_FILE

    notes = []
    if not settings.auth.admin_token and token_file(settings).is_file():
        notes.append(
            f"the admin token was generated into {token_file(settings)}: give every instance that value "
            "(MESH_ADMIN_TOKEN or auth.admin_token)"
        )
    key = source.parent / KEY_FILE
    if not settings.decisions.signing_key and key.is_file():
        notes.append(
            f"decisions were signed with {key}: set decisions.signing_key to its contents on every instance, "
            "so precedents signed before the move still count"
        )
    return notes


def _print_report(result: Migration, notes: list[str], out: TextIO) -> None:
    print(
        f"copied {result.rows} rows of {len(result.copied)} tables from {result.source} to {result.target} "
        f"in {result.seconds:.1f}s",
        file=out,
    )
    for name, n in result.copied.items():
        mark = "ok" if result.counted.get(name) == n else "DIFFERS"
        print(f"  {name:<26} {n:>9}  {mark}", file=out)
    if result.skipped:
        print(
            f"not copied (SQLite's own, and its FTS5 index: PostgreSQL indexes itself): {', '.join(result.skipped)}",
            file=out,
        )
    t = result.trace
    if t.get("break"):
        print(f"trace chain BROKEN: {t['break']}", file=out)
    elif t.get("chained"):
        print(
            f"trace chain holds: {t['chained']} lines, seq {t.get('first_seq')} → {t.get('last_seq')}, "
            f"head {t.get('head')}",
            file=out,
        )
    else:
        print("trace chain: no traces", file=out)
    m = result.memory
    if m.get("break"):
        print(f"memory chain BROKEN: {m['break']}", file=out)
    elif m:
        print(f"memory chain holds: {m['entries']} entries", file=out)
    if result.vectors_indexed:
        print(f"pgvector: {result.vectors_indexed} vectors indexed", file=out)
    for note in notes:
        print(f"note: {note}", file=out)


@click.command("migrate-to", context_settings=CONTEXT)
@click.argument("url", metavar="postgresql://…")
@click.option(
    "--config",
    "-c",
    default=None,
    metavar="FILE",
    help="config.yaml (its storage_path is the source; default $FLUX7_CONFIG, ./config.yaml, else the built-in "
    "defaults)",
)
@click.option("--from", "from_path", default=None, metavar="FILE", help="the SQLite file to copy instead")
@click.option("--batch", type=click.IntRange(min=1), default=BATCH, show_default=True, help="rows per COPY batch")
def migrate_to(url: str, config: str | None, from_path: str | None, batch: int) -> int:
    """Copy a SQLite deployment into an empty PostgreSQL database (migrated here if it is not yet), in one
    transaction, then check it: row counts per table, the trace hash chain and the memory chain.

    Stop the SQLite server first (what it writes after the copy started is not copied), and start the
    PostgreSQL instances after (`database:` or FLUX7_DATABASE_URL)."""
    rt = runtime()
    choice = choose_config(config, rt.env)  # --config, FLUX7_CONFIG, ./config.yaml, else the built-in defaults
    if not from_path:
        announce(choice, rt.err, "flux7 db migrate-to")
    try:
        settings = load_settings(choice.path, {**rt.env, "FLUX7_DATABASE_URL": ""})
    except ConfigError as e:
        raise Fail(f"config error: {e}", 2) from None
    source = Path(from_path).expanduser().resolve() if from_path else settings.resolve_path(settings.storage_path)
    trace_key = rt.env.get("MESH_TRACE_KEY", "").encode() or None
    with _progress(rt.err) as advance:
        try:
            result = migrate(
                source,
                url,
                trace_key=trace_key,
                memory_key=settings.memory.chain_key.encode(),
                batch=batch,
                progress=advance,
            )
        except MigrationError as e:
            raise Fail(str(e), e.code) from None
    _print_report(result, _local_files(settings, source), rt.out)
    problems = result.problems()
    if problems:
        for p in problems:
            print(f"does not verify: {p}", file=rt.err)
        raise Fail(
            f"the copy in {result.target} does not verify; drop that database and create it anew before trying again", 1
        )
    print("verified: every row count matches and the chains hold", file=rt.out)
    return 0


@contextlib.contextmanager
def _progress(err: TextIO) -> Iterator[Callable[[str, int, int], None]]:
    """rows copied / rows to copy, on stderr (rich draws a bar on a terminal and the final state elsewhere),
    shown from the first batch on: input refused before the copy starts prints its message alone."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("copy"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=Console(file=err),
    )
    task = bar.add_task("", total=None)

    def advance(name: str, done: int, total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        bar.update(task, total=total, completed=done, description=name)

    try:
        yield advance
    finally:
        if bar.live.is_started:
            bar.stop()


def main(argv: list[str] | None = None, env: Any = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`flux7 db migrate-to`."""
    return run(migrate_to, argv, prog="flux7 db migrate-to", env=env, out=out, err=err)


if __name__ == "__main__":
    raise SystemExit(main())
