"""Both engines end with the same schema, and several instances starting at once apply each migration once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.paths import MIGRATIONS_DIR
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database, SqliteDatabase, sqlite3
from flux7.shared.store.postgresql import PG_MIGRATIONS_DIR, PostgresDatabase
from tests.support import postgres

# Full-text search is engine-specific by design: FTS5's virtual table (and its shadow tables) on SQLite,
# generated tsvector columns on PostgreSQL (migrations/postgresql/0003_memory.sql, 0020_memory_fts.sql), and the
# pgvector column 0020 adds where the server has the extension.
SQLITE_ONLY_TABLES = ("facts_fts",)
POSTGRES_ONLY_COLUMNS = {("facts", "fts"), ("facts", "fts_english"), ("memory_vectors", "embedding")}

Schema = dict[str, dict[str, Any]]


def sqlite_schema(path: Path) -> Schema:
    conn = sqlite3.connect(str(path))
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            if not r[0].startswith(SQLITE_ONLY_TABLES)
        ]
        out: Schema = {}
        for table in tables:
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
            # A primary key column is NOT NULL in PostgreSQL; SQLite's PRAGMA reports what was written.
            columns = {r[1]: bool(r[3]) or r[1] in pk for r in info}
            unique = set()
            for index in conn.execute(f"PRAGMA index_list({table})").fetchall():
                if index[2] and index[3] == "u":  # unique, from a UNIQUE constraint
                    unique.add(tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index[1]})")))
            out[table] = {"columns": columns, "primary_key": pk, "unique": unique}
        return out
    finally:
        conn.close()


def postgres_schema(url: str) -> Schema:
    with psycopg.connect(url) as conn:
        out: Schema = {}
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ]
        for table in tables:
            columns = {
                name: nullable == "NO"
                for name, nullable in conn.execute(
                    "SELECT column_name, is_nullable FROM information_schema.columns"
                    " WHERE table_schema = 'public' AND table_name = %s",
                    (table,),
                )
                if (table, name) not in POSTGRES_ONLY_COLUMNS
            }
            keys: dict[str, tuple[str, list[str]]] = {}
            for name, kind, column in conn.execute(
                "SELECT tc.constraint_name, tc.constraint_type, k.column_name"
                " FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage k"
                " ON k.constraint_name = tc.constraint_name AND k.table_name = tc.table_name"
                " WHERE tc.table_schema = 'public' AND tc.table_name = %s"
                " AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE') ORDER BY k.ordinal_position",
                (table,),
            ):
                keys.setdefault(name, (kind, []))[1].append(column)
            pk = next((tuple(cols) for kind, cols in keys.values() if kind == "PRIMARY KEY"), ())
            unique = {tuple(cols) for kind, cols in keys.values() if kind == "UNIQUE"}
            out[table] = {"columns": columns, "primary_key": pk, "unique": unique}
        return out


def test_every_sqlite_migration_has_a_postgresql_twin() -> None:
    sqlite_names = sorted(p.name for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    postgres_names = sorted(p.name for p in PG_MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert sqlite_names and postgres_names == sqlite_names


def test_both_engines_end_with_the_same_tables_columns_and_keys(tmp_path: Path, postgres_admin_url: str) -> None:
    SqliteDatabase(tmp_path / "flux7.db").close()
    url = postgres.create_database(postgres_admin_url, empty=True)
    try:
        PostgresDatabase(url).close()
        lite, pg = sqlite_schema(tmp_path / "flux7.db"), postgres_schema(url)
    finally:
        postgres.drop_database(postgres_admin_url, url)
    assert sorted(pg) == sorted(lite)
    for table in lite:
        assert pg[table] == lite[table], table
    # the comparison saw the keys that matter: the chain head's and the tokens' unique hash
    assert lite["trace_chain"]["primary_key"] == ("id",)
    assert lite["agent_tokens"]["unique"] == {("token_hash",)}
    assert lite["approvals"]["columns"]["status"] is True and lite["approvals"]["columns"]["resolved_at"] is False


def test_instances_starting_at_once_apply_each_migration_once(postgres_admin_url: str) -> None:
    url = postgres.create_database(postgres_admin_url, empty=True)
    try:
        applied: list[list[str]] = []
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def boot() -> None:
            try:
                db = Database(url, migrate=False)
                start.wait(10)
                applied.append(db.migrate())
                db.close()
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=boot) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        every = sorted(p.name for p in PG_MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
        # one instance applied all of them, the others found them done
        assert sorted(len(a) for a in applied) == [0, 0, 0, len(every)]
        with psycopg.connect(url) as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]
        assert names == every
    finally:
        postgres.drop_database(postgres_admin_url, url)


def test_the_database_setting_selects_the_engine(tmp_path: Path) -> None:
    assert load_settings(None, env={}).database == ""
    url = "postgresql://flux7:secret@db.internal:5432/flux7"
    off = {"enabled": False}
    assert load_settings(None, env={}, database=url, memory=off).database == url
    # the environment names the deployment's database (a secret kept out of config.yaml)
    assert load_settings(None, env={"FLUX7_DATABASE_URL": url}, memory=off).database == url
    # a path is the SQLite file
    as_path = load_settings(None, env={}, database=str(tmp_path / "other.db"))
    assert (as_path.database, as_path.storage_path) == ("", str(tmp_path / "other.db"))
    with pytest.raises(ConfigError, match="postgresql:// URL or a SQLite file path, got mysql://"):
        load_settings(None, env={}, database="mysql://x/y", memory={"enabled": False})
    # memory (on by default) runs on the same database
    assert load_settings(None, env={}, database=url).memory.enabled
    assert load_settings(None, env={}, database=url, memory={"url": "http://mem7:8080"}).database == url


def test_an_unreachable_server_is_a_clear_unavailable_error() -> None:
    from flux7.shared.errors import Unavailable
    from tests.support.http import free_port

    with pytest.raises(Unavailable, match=r"cannot connect to postgresql://flux7:\*\*\*@127.0.0.1"):
        PostgresDatabase(f"postgresql://flux7:secret@127.0.0.1:{free_port()}/x?connect_timeout=1")


def _migrations_before(source: Path, target: Path, first_missing: str) -> Path:
    """A copy of a migrations folder holding only the files before `first_missing`: an older deployment."""
    target.mkdir()
    for file in sorted(source.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        if file.name >= first_missing:
            break
        (target / file.name).write_text(file.read_text())
    return target


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_the_health_counts_move_into_the_chain_head_row_and_keep_their_values(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Migration 0022 folds trace_stats into trace_chain (one UPDATE per trace write instead of two): a deployment
    # written before it keeps its counts and its chain head.
    counts = (41, 30, 6, 5, 3, 1200, 3400)
    columns = "total, allowed, denied, human_approval, errors, estimated_input_tokens, estimated_output_tokens"
    url = ""
    if engine == "sqlite":
        older = _migrations_before(MIGRATIONS_DIR, tmp_path / "older", "0022")
        db: Database = SqliteDatabase(tmp_path / "flux7.db", migrate=False)
    else:
        admin = request.getfixturevalue("postgres_admin_url")
        url = postgres.create_database(admin, empty=True)
        older = _migrations_before(PG_MIGRATIONS_DIR, tmp_path / "older", "0022")
        db = PostgresDatabase(url, migrate=False)
    try:
        db.migrate(older)
        with db.write() as conn:
            conn.execute(f"UPDATE trace_stats SET ({columns}) = ({', '.join(str(c) for c in counts)}) WHERE id = 1")
            conn.execute("UPDATE trace_chain SET seq = 41, hash = 'ab12' WHERE id = 1")
        assert db.migrate()[0] == "0022_trace_stats_in_chain.sql"
        row = db.query_one(f"SELECT seq, hash, {columns} FROM trace_chain WHERE id = 1")
        assert row is not None and tuple(row) == (41, "ab12", *counts)
        assert not db.has_table("trace_stats")
    finally:
        db.close()
        if url:
            postgres.drop_database(request.getfixturevalue("postgres_admin_url"), url)
