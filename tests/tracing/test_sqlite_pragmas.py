"""The SQLite connection settings every writer and reader of a deployment uses: the durability the design
promises (WAL, synchronous=NORMAL) and the checkpoint interval that keeps checkpoints off most calls
(bench/trace_write_bench.py)."""

from __future__ import annotations

from pathlib import Path

from flux7.shared.db import WAL_AUTOCHECKPOINT_PAGES, SqliteDatabase


def test_writer_and_reader_share_the_configured_pragmas(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "flux7.db")
    try:
        with db.write() as writer:
            seen_writer = writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
            durability = (
                writer.execute("PRAGMA journal_mode").fetchone()[0],
                writer.execute("PRAGMA synchronous").fetchone()[0],
            )
        seen_reader = db.reader.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    finally:
        db.close()
    assert WAL_AUTOCHECKPOINT_PAGES == 4000
    assert (seen_writer, seen_reader) == (4000, 4000)
    assert durability == ("wal", 1)  # synchronous=NORMAL


def test_the_wal_is_checkpointed_into_the_database_file(tmp_path: Path) -> None:
    """Past the interval a commit checkpoints on its own (no close, no explicit checkpoint): the rows reach the
    main database file."""
    path = tmp_path / "flux7.db"
    db = SqliteDatabase(path)
    try:
        before = path.stat().st_size
        blob = b"x" * 3000  # about one page a row
        for i in range(WAL_AUTOCHECKPOINT_PAGES + 200):
            with db.write() as conn:
                conn.execute("INSERT INTO trace_lines (seq, line) VALUES (?, ?)", (i + 1, blob))
        assert path.stat().st_size > before + WAL_AUTOCHECKPOINT_PAGES * 2048
    finally:
        db.close()
