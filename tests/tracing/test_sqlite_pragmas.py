"""The SQLite connection settings every writer and reader of a deployment uses: the durability the design
promises (WAL, synchronous=NORMAL), and checkpoints kept off the writer's thread (an event loop): the store's
checkpoint thread copies the WAL into the database file every `checkpoint_every` commits."""

from __future__ import annotations

from pathlib import Path

from flux7.shared.store.db import CHECKPOINT_EVERY_COMMITS, WAL_AUTOCHECKPOINT_PAGES, SqliteDatabase
from tests.support.waiting import wait_until

BLOB = b"x" * 3000  # about one page a row


def _insert(db: SqliteDatabase, first: int, n: int) -> None:
    for i in range(first, first + n):
        with db.write() as conn:
            conn.execute("INSERT INTO trace_lines (seq, line) VALUES (?, ?)", (i, BLOB))


def test_the_writer_never_checkpoints_and_readers_keep_sqlites_threshold(tmp_path: Path) -> None:
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
    assert (seen_writer, seen_reader) == (0, WAL_AUTOCHECKPOINT_PAGES)
    assert durability == ("wal", 1)  # synchronous=NORMAL
    assert CHECKPOINT_EVERY_COMMITS == 400


def test_commits_past_sqlites_threshold_leave_the_database_file_alone(tmp_path: Path) -> None:
    # Before, the commit that crossed 4,000 WAL pages checkpointed (fsyncs included) on the writer's thread.
    path = tmp_path / "flux7.db"
    db = SqliteDatabase(path)
    db.checkpoint_every = 10**9  # no checkpoint asked for
    try:
        before = path.stat().st_size
        _insert(db, 1, WAL_AUTOCHECKPOINT_PAGES + 200)
        assert path.stat().st_size == before
        assert Path(f"{path}-wal").stat().st_size > WAL_AUTOCHECKPOINT_PAGES * 4096
        assert db.checkpoints == 0
    finally:
        db.close()


def test_the_checkpoint_thread_copies_the_wal_and_keeps_it_from_growing(tmp_path: Path) -> None:
    path = tmp_path / "flux7.db"
    db = SqliteDatabase(path)
    db.checkpoint_every = 50
    wal = Path(f"{path}-wal")
    try:
        before = path.stat().st_size
        sizes = []
        for round_ in range(6):
            _insert(db, 1 + 50 * round_, 50)  # the 50th commit asks for a checkpoint
            wait_until(lambda r=round_: db.checkpoints == r + 1, what=f"checkpoint {round_ + 1}")
            sizes.append(wal.stat().st_size)
        # The rows reached the database file without a close or an explicit checkpoint.
        assert path.stat().st_size > before + 250 * 2048
        # Each checkpoint copied the whole WAL, so the next commits started it over: it stops growing (without
        # the restart the sixth round would leave it six times the first's; a b-tree split may add a page or two).
        assert sizes[-1] < 1.5 * sizes[0]
        with db.write() as conn:
            assert conn.execute("SELECT count(*) FROM trace_lines").fetchone()[0] == 300
    finally:
        db.close()
