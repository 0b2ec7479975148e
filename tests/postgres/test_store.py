"""The PostgreSQL engine behind the store seam: SQLite-flavoured SQL and rows, transactions, and the trace
chain extended by several processes at once, serialised on its head row rather than on every write."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database
from flux7.shared.store.postgresql import PostgresDatabase
from flux7.shared.store.translate import translate
from flux7.shared.tracing import TraceEntry, Tracer
from tests.support.waiting import wait_until
from tests.tracing import workers


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    database = Database(postgres_url)
    assert isinstance(database, PostgresDatabase)
    yield database
    database.close()


def test_placeholders_are_translated_outside_strings_and_comments() -> None:
    assert translate("SELECT ? WHERE a LIKE '%?%' -- why?\n AND b = ?", False) == (
        "SELECT %s WHERE a LIKE '%%?%%' -- why?\n AND b = %s"
    )
    assert translate("SELECT :name, 'x:y', a::text, :other_1", True) == "SELECT %(name)s, 'x:y', a::text, %(other_1)s"
    assert translate('SELECT "odd?col" FROM t WHERE x = ?', False) == 'SELECT "odd?col" FROM t WHERE x = %s'


def test_rows_read_by_index_and_by_name_and_values_come_back_as_sqlite_gives_them(db: Database) -> None:
    with db.write() as conn:
        conn.execute(
            "INSERT INTO grants (id, agent, tools, created_at, expires_at, granted_by) VALUES (?, ?, ?, ?, ?, ?)",
            ("g1", "bot", "echo.*", 1.5, 2.5, "it's 100% ann"),
        )
        conn.execute("INSERT INTO approvals_clock (id, seq) VALUES (1, 0) ON CONFLICT DO NOTHING")
    row = db.query_one("SELECT id, granted_by, expires_at - created_at AS span FROM grants WHERE agent = ?", ("bot",))
    assert row is not None
    assert (row[0], row["granted_by"], row["span"]) == ("g1", "it's 100% ann", 1.0)
    assert dict(row) == {"id": "g1", "granted_by": "it's 100% ann", "span": 1.0} and row.keys() == list(dict(row))
    # named parameters, a boolean into an INTEGER column (as sqlite3 stores it), SUM and AVG as int and float
    db.execute(
        "INSERT INTO mcp_sessions (id, agent_id, authenticated, created_at, last_seen) VALUES (:id, :a, :auth, 1, 2)",
        {"id": "s1", "a": "bot", "auth": True},
    )
    sums = db.query_one("SELECT authenticated, SUM(authenticated), AVG(via_jwt + 0.5) FROM mcp_sessions GROUP BY 1")
    assert tuple(sums) == (1, 1, 0.5)
    assert db.query_one("SELECT 1 FROM grants WHERE id = ?", ("none",)) is None


def test_a_failed_block_rolls_back_and_an_integrity_error_is_named(db: Database) -> None:
    with pytest.raises(RuntimeError), db.write() as conn:
        conn.execute("INSERT INTO tool_pins (tool, fingerprint, pinned_at) VALUES ('a.b', 'f', 1)")
        raise RuntimeError("undo")
    assert db.query("SELECT * FROM tool_pins") == []
    db.execute("INSERT INTO tool_pins (tool, fingerprint, pinned_at) VALUES ('a.b', 'f', 1)")
    with pytest.raises(Exception) as caught:
        db.execute("INSERT INTO tool_pins (tool, fingerprint, pinned_at) VALUES ('a.b', 'g', 2)")
    assert db.is_integrity_error(caught.value)


def test_a_trace_append_is_not_held_up_by_another_write_in_progress(db: Database, postgres_url: str) -> None:
    tracer = Tracer(load_settings(None, env={}, database=postgres_url, memory={"enabled": False}), db)
    done = threading.Event()
    with db.write() as conn:  # an ordinary write holds the store-wide write lock until this block ends
        conn.execute("INSERT INTO tool_pins (tool, fingerprint, pinned_at) VALUES ('a.b', 'f', 1)")
        thread = threading.Thread(
            target=lambda: (tracer.record(TraceEntry(agent_id="a", tool="t", policy="allow")), done.set())
        )
        thread.start()
        # the append serialises on the chain head row only, so it commits while the other write is open
        wait_until(done.is_set, timeout=10, what="the trace append to commit beside the open write")
    thread.join(10)
    assert tracer.store.head()[0] == 1


@pytest.mark.served
def test_processes_appending_at_once_extend_one_valid_chain(db: Database, postgres_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=workers.append_traces, args=(postgres_url, "", w, 60, 0, start)) for w in range(3)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    tracer = Tracer(load_settings(None, env={}, database=postgres_url, memory={"enabled": False}), db)
    report = tracer.verify()
    assert report.get("break") is None, report
    assert (report["chained"], report["first_seq"], report["last_seq"]) == (180, 1, 180)
    assert tracer.counts()["total"] == 180
    seqs = [r[0] for r in db.query("SELECT seq FROM trace_lines ORDER BY seq")]
    assert seqs == list(range(1, 181))


def test_writes_from_several_instances_are_serialised_as_sqlite_serialises_them(postgres_url: str) -> None:
    # read-modify-write code written for SQLite's one writer stays exact: each instance (its own pool) reads the
    # counter and writes it back inside write(), and no increment is lost
    stores = [Database(postgres_url) for _ in range(3)]
    start = threading.Barrier(len(stores) * 2)

    def bump(store: Database) -> None:
        start.wait(10)
        for _ in range(40):
            with store.write() as conn:
                seq = conn.execute("SELECT seq FROM approvals_clock WHERE id = 1").fetchone()[0]
                conn.execute("UPDATE approvals_clock SET seq = ? WHERE id = 1", (seq + 1,))

    threads = [threading.Thread(target=bump, args=(s,)) for s in stores for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert stores[0].query_one("SELECT seq FROM approvals_clock WHERE id = 1")[0] == 40 * len(threads)
    finally:
        for s in stores:
            s.close()


def test_text_with_a_nul_character_is_a_bad_request_on_postgresql(store: Database) -> None:
    from flux7.shared.errors import BadRequest

    if store.engine != "postgresql":
        # SQLite keeps the character: the same statement stores it
        store.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", ("a\x00b", "now"))
        assert store.query_one("SELECT count(*) FROM schema_migrations WHERE name = ?", ("a\x00b",))[0] == 1
        return
    with pytest.raises(BadRequest, match="NUL"):
        store.query("SELECT 1 FROM schema_migrations WHERE name = ?", ("a\x00b",))
    with pytest.raises(BadRequest, match="NUL"), store.write() as conn:
        conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", ("a\x00b", "now"))
    assert store.query_one("SELECT count(*) FROM schema_migrations WHERE name LIKE 'a%'")[0] == 0


def test_a_trace_whose_params_hold_a_nul_character_is_counted_and_verified(store: Database, tmp_path: Path) -> None:
    # JSON escapes the character as \u0000, which PostgreSQL's jsonb refuses: the outcome-unknown count reads it
    target = getattr(store, "url", "") or store.path
    settings = load_settings(None, env={}, database=target, memory={"enabled": False})
    tracer = Tracer(settings, store)
    tracer.record(TraceEntry(agent_id="a", tool="t", policy="allow", params={"q": "a\x00b"}))
    tracer.record(TraceEntry(agent_id="a", tool="t", policy="allow", params={"q": "x"}, status_code=200))
    # a literal backslash before "u0000", beside a real NUL: still one JSON document with its status code
    literal = {"q": "\\u0000 \\\x00", "status_code": 0}
    tracer.record(TraceEntry(agent_id="a", tool="t", policy="allow", params=literal, status_code=200))
    count, rows = tracer.store.outcome_unknown()
    assert count == 1 and len(rows) == 1
    report = tracer.verify()
    assert "break" not in report and report["last_seq"] == 3
