"""`flux7 doctor` on a PostgreSQL deployment: the server reached, migrations, pgvector (on a server that has it:
`pgvector_admin_url`), clock skew, and the policy and catalog files on this instance's disk against the
deployment's copy in the database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from flux7.shared.gate.policy_files import snapshot
from flux7.shared.store.db import Database
from tests.support import postgres
from tests.support.http import free_port
from tests.support.server import REPO


def doctor(
    tmp_path: Path, url: str, extra: str = "", areas: tuple[str, ...] = ("database", "replication")
) -> tuple[int, list[dict[str, Any]]]:
    config = tmp_path / "config.yaml"
    config.write_text(f"database: {url}\nmemory: {{enabled: false}}\n{extra}")
    skip = ["--skip", "embeddings", "--skip", "upstreams"]
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "doctor", "--config", str(config), "--json", *skip],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    findings = json.loads(done.stdout)["findings"]
    return done.returncode, [f for f in findings if f["area"] in areas]


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


POLICY = 'name: agents\nagent: "*"\nrules:\n  - tools: ["*"]\n    action: allow\n'
CATALOG = "agents:\n  - id: claude\n    owner: ann\n"


def test_the_policy_and_catalog_files_are_compared_with_the_deployments_copy(tmp_path: Path, postgres_url: str) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "agents.yaml").write_text(POLICY)
    (tmp_path / "catalog").mkdir()
    (tmp_path / "catalog" / "claude.yaml").write_text(CATALOG)
    extra = "policy_dir: policies\ncatalog_dir: catalog\n"
    areas = ("policies", "catalog")
    db = Database(postgres_url)
    try:
        snapshot(db, tmp_path / "policies", "policy_files")  # as an instance records the set it loaded
        code, found = doctor(tmp_path, postgres_url, extra, areas)
        assert code == 0, found
        assert [(f["area"], f["status"]) for f in found] == [("policies", "ok"), ("catalog", "warn")], found
        assert found[0]["detail"] == f"{tmp_path / 'policies'}: 1 files, the same as the database's copy"
        assert found[1]["detail"] == "the database holds no copy of the catalog files yet"

        snapshot(db, tmp_path / "catalog", "catalog_files")
        assert [f["status"] for f in doctor(tmp_path, postgres_url, extra, areas)[1]] == ["ok", "ok"]

        # another instance recorded a catalog file this one has not written yet, and this disk has a file of its own
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "claude.yaml").write_text(CATALOG.replace("ann", "bob"))
        snapshot(db, tmp_path / "elsewhere", "catalog_files")
        (tmp_path / "policies" / "extra.yaml").write_text(POLICY.replace("agents", "extra"))
        code, found = doctor(tmp_path, postgres_url, extra, areas)
    finally:
        db.close()
    assert code == 0, found  # a warning, not a failure
    policies, catalog = found
    assert policies["status"] == catalog["status"] == "warn", found
    assert policies["detail"] == f"{tmp_path / 'policies'}: differs from the database's copy: extra.yaml"
    assert catalog["detail"] == f"{tmp_path / 'catalog'}: differs from the database's copy: claude.yaml"
    assert catalog["fix"].startswith("the database's copy is the deployment's: a running instance writes it here")
