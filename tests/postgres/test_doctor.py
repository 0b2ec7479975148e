"""`flux7 doctor` on a PostgreSQL deployment: the server reached, migrations, pgvector (on a server that has it:
`pgvector_admin_url`), clock skew."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from tests.support import postgres
from tests.support.http import free_port
from tests.support.server import REPO


def doctor(tmp_path: Path, url: str) -> tuple[int, list[dict[str, Any]]]:
    config = tmp_path / "config.yaml"
    config.write_text(f"database: {url}\nmemory: {{enabled: false}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "doctor", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    findings = json.loads(done.stdout)["findings"]
    return done.returncode, [f for f in findings if f["area"] in ("database", "replication")]


def test_a_migrated_database_is_healthy_and_its_clock_checked(tmp_path: Path, postgres_url: str) -> None:
    code, found = doctor(tmp_path, postgres_url)
    assert code == 0, found
    details = [f["detail"] for f in found if f["status"] == "ok"]
    available = len(list(Path(REPO, "migrations", "postgresql").glob("[0-9]*.sql")))
    assert any(f"migrations applied of {available}" in d and "PostgreSQL 1" in d for d in details), found
    assert any(d.startswith("clock within") for d in details), found
    assert {"area": "replication", "status": "skip"}.items() <= found[-1].items()


def test_an_empty_database_has_its_migrations_pending_and_a_dead_one_fails(
    tmp_path: Path, postgres_admin_url: str
) -> None:
    empty = postgres.create_database(postgres_admin_url, empty=True)
    try:
        code, found = doctor(tmp_path, empty)
    finally:
        postgres.drop_database(postgres_admin_url, empty)
    assert code == 0  # pending migrations are a warning: the next start applies them
    assert any(f["status"] == "warn" and "pending: 0002_traces.sql" in f["detail"] for f in found), found
    code, found = doctor(tmp_path, f"postgresql://flux7:pw@127.0.0.1:{free_port()}/x?connect_timeout=1")
    assert code == 1
    assert found[0]["status"] == "fail" and "cannot connect to postgresql://flux7:***@" in found[0]["detail"]


def test_doctor_reports_pgvector_where_the_server_has_it_and_warns_where_not(
    tmp_path: Path, pgvector_admin_url: str, postgres_url: str
) -> None:
    with_vector = postgres.create_database(pgvector_admin_url)
    try:
        with psycopg.connect(with_vector) as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert row is not None
        code, found = doctor(tmp_path, with_vector)
    finally:
        postgres.drop_database(pgvector_admin_url, with_vector)
    assert code == 0, found
    assert {"area": "database", "status": "ok", "detail": f"pgvector {row[0]}"}.items() <= found[1].items(), found
    assert not any("no pgvector" in f["detail"] for f in found), found
    # Debian's server (no pgvector package): a warning that says what it costs and what to install
    code, found = doctor(tmp_path, postgres_url)
    assert code == 0, found
    warned = [f for f in found if f["status"] == "warn" and f["detail"] == "no pgvector: vectors are scanned exactly"]
    assert warned and warned[0]["fix"] == "install pgvector on the server", found
