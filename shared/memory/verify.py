"""What `mem7 verify` checks: a workspace on disk, or with `--db` the journal in a database, and nothing else.

Tamper evidence that says "chain holds" about the wrong thing is worse than none, so a target that is missing,
is not an SQLite database, or holds no memory journal is refused (VerifyRefused) instead of walked as empty.
The database is opened read-only: verifying never creates, migrates or locks a file (a PostgreSQL database,
`--db postgresql://…`, is read without migrating it).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from flux7.shared.memory.chain import ChainReport, verify_chain, verify_daily_files
from flux7.shared.memory.workspace import MEMORY_SUBDIR
from flux7.shared.store.db import Database

__all__ = ["VerifyRefused", "database_head", "verify_database", "verify_workspace"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


class VerifyRefused(Exception):
    """The target cannot be verified; the message says why."""


def verify_workspace(workspace: Path, key: bytes, head: str = "") -> ChainReport:
    """The markdown workspace `<MEM7_DIR>/workspace`; it must exist (an empty one holds 0 entries)."""
    if not (workspace / MEMORY_SUBDIR).is_dir():
        raise VerifyRefused(f"no memory workspace at {workspace} (set MEM7_DIR, or --db for a database's journal)")
    return verify_chain(workspace, key, head)


def _open(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise VerifyRefused(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    with path.open("rb") as f:
        if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            raise VerifyRefused(f"{path}: not an SQLite database")
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise VerifyRefused(f"{path}: cannot open: {e}") from None


def _bytes(value: object) -> bytes:
    # A chunk is a BLOB; one rewritten as TEXT (by hand, in the sqlite3 shell) is read as its UTF-8 bytes.
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else b""


def database_head(path: Path) -> str:
    """The last seal a database recorded, or "" when there is no such database (the workspace is then checked
    by its seals alone)."""
    try:
        conn = _open(path)
    except VerifyRefused:
        return ""
    try:
        row = conn.execute("SELECT head FROM memory_chain WHERE id = 1").fetchone()
        return str(row[0]) if row else ""
    except sqlite3.DatabaseError:
        return ""
    finally:
        conn.close()


def verify_database(path: Path, key: bytes) -> ChainReport:
    """The journal in a flux7 or mem7 database: the daily files as the database recorded them (what a
    replica restores), checked against the database's own head."""
    conn = _open(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = {"memory_journal", "memory_chain"} - tables
        if missing:
            raise VerifyRefused(
                f"{path}: no memory journal in this database (missing {', '.join(sorted(missing))}); "
                "not a flux7 or mem7 database"
            )
        row = conn.execute("SELECT head FROM memory_chain WHERE id = 1").fetchone()
        head = str(row[0]) if row else ""
        names = [str(r[0]) for r in conn.execute("SELECT DISTINCT file FROM memory_journal ORDER BY 1")]

        def files() -> list[tuple[str, str, bytes]]:
            out = []
            for name in names:
                rows = conn.execute("SELECT chunk FROM memory_journal WHERE file = ? ORDER BY seq", (name,))
                out.append((name, f"{path}#memory_journal:{name}", b"".join(_bytes(r[0]) for r in rows)))
            return out

        return verify_daily_files(files(), key, head)
    except sqlite3.DatabaseError as e:
        raise VerifyRefused(f"{path}: {e}") from None
    finally:
        conn.close()


def verify_store(db: Database, key: bytes) -> ChainReport:
    """The journal in a PostgreSQL database (`--db postgresql://…`), as verify_database reads a file's."""
    if not (db.has_table("memory_journal") and db.has_table("memory_chain")):
        raise VerifyRefused(f"{db.label}: no memory journal in this database; not a flux7 or mem7 database")
    row = db.query_one("SELECT head FROM memory_chain WHERE id = 1")
    head = str(row[0]) if row else ""
    names = [str(r[0]) for r in db.query("SELECT DISTINCT file FROM memory_journal ORDER BY 1")]
    files = []
    for name in names:
        rows = db.query("SELECT chunk FROM memory_journal WHERE file = ? ORDER BY seq", (name,))
        files.append((name, f"{db.label}#memory_journal:{name}", b"".join(_bytes(r[0]) for r in rows)))
    return verify_daily_files(files, key, head)
