"""Every verify command checks what it was pointed at, or refuses: run as a user runs them (subprocesses).

`mem7 verify --db nope.db` used to answer "chain holds" about the default workspace; tamper evidence that says
OK about the wrong file is worse than none."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.memory.service import MemoryService
from flux7.shared.store.db import Database
from flux7.shared.tracing import TraceEntry, Tracer
from tests.memory.stores import Stores
from tests.tracing.conftest import make_settings

from .conftest import REPO, call
from .test_cli import mem7

pytestmark = pytest.mark.served


def _stored(make_service: Any, root: Path, n: int, key: str = "") -> MemoryService:
    service: MemoryService = make_service(root, chain_key=key)
    for i in range(n):
        call(service, "memory_store", key=f"k{i}", value=f"value {i}")
    return service


def _refused(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr, result.stderr
    assert "chain holds" not in result.stdout + result.stderr


def test_mem7_verify_db_refuses_what_is_not_a_memory_database(tmp_path: Path, make_service: Any) -> None:
    _stored(make_service, tmp_path / "home", 2)  # a good default workspace that must not be what gets checked
    (tmp_path / "notes.txt").write_text("not a database\n")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    (tmp_path / "dir.db").mkdir()
    home = tmp_path / "home"
    _refused(mem7(home, "verify", "--db", str(tmp_path / "nope.db")), "nope.db: no such file")
    assert not (tmp_path / "nope.db").exists()  # verifying never creates the file
    _refused(mem7(home, "verify", "--db", str(tmp_path / "notes.txt")), "not an SQLite database")
    _refused(mem7(home, "verify", "--db", str(tmp_path / "other.db")), "no memory journal in this database")
    _refused(mem7(home, "verify", "--db", str(tmp_path / "dir.db")), "not a file")
    _refused(mem7(home, "verify", "--json", "--db", str(tmp_path / "nope.db")), "no such file")


def test_mem7_verify_db_checks_that_database_journal(tmp_path: Path, make_service: Any, stores: Stores) -> None:
    _stored(make_service, tmp_path / "home", 2)
    other = _stored(make_service, tmp_path / "other", 5, key="k")
    other.close()
    db = stores.target(tmp_path / "other")  # index.db, or with --engine=postgresql that database's URL
    ok = mem7(tmp_path / "home", "verify", "--db", str(db), key="k")
    assert ok.returncode == 0 and ok.stdout.startswith("5 entries: 5 sealed"), ok.stdout + ok.stderr
    assert ok.stdout.rstrip().endswith("chain holds")
    # Tamper with the database's copy only (the markdown stays intact): --db sees it.
    store = Database(db, migrate=False)
    (seq, chunk) = store.query_one("SELECT seq, chunk FROM memory_journal WHERE entity = 'k3'")
    store.execute(
        "UPDATE memory_journal SET chunk = ? WHERE seq = ?", (bytes(chunk).replace(b"value 3", b"value 9"), seq)
    )
    store.close()
    broken = mem7(tmp_path / "home", "verify", "--db", str(db), key="k")
    assert broken.returncode == 1 and "content changed since it was sealed" in broken.stdout, broken.stdout
    assert "#memory_journal:" in broken.stdout  # the break names the database, not a file on disk
    home = stores.env(tmp_path / "other")
    assert mem7(tmp_path / "other", "verify", key="k", env=home).returncode == 0  # the workspace itself holds


def test_mem7_verify_refuses_a_missing_workspace_and_sees_a_cut_end(
    tmp_path: Path, make_service: Any, stores: Stores
) -> None:
    _refused(mem7(tmp_path / "empty", "verify"), "no memory workspace at")
    service = _stored(make_service, tmp_path / "m", 3)
    service.close()
    env = stores.env(tmp_path / "m")  # the index holding the head: index.db, or MEM7_DATABASE_URL's database
    assert mem7(tmp_path / "m", "verify", env=env).returncode == 0
    # Cut the last entry off the last daily file: every remaining seal still checks, the database's head does not.
    daily = sorted((tmp_path / "m" / "workspace" / "memory").glob("*.md"))[-1]
    text = daily.read_bytes()
    daily.write_bytes(text[: text.rindex(b"\n## k2\n")])
    cut = mem7(tmp_path / "m", "verify", env=env)
    assert cut.returncode == 1 and "the database's head is" in cut.stdout, cut.stdout + cut.stderr
    daily.unlink()  # and a deleted daily file
    gone = mem7(tmp_path / "m", "verify", env=env)
    assert gone.returncode == 1 and "a workspace file is missing" in gone.stdout, gone.stdout


def test_the_memory_chain_route_sees_a_deleted_daily_file(tmp_path: Path, make_service: Any) -> None:
    service = _stored(make_service, tmp_path / "m", 2)
    assert service.chain()["holds"] is True
    for daily in (tmp_path / "m" / "workspace" / "memory").glob("*.md"):
        daily.unlink()
    report = service.chain()
    assert report["holds"] is False and "a workspace file is missing" in report["report"]["break"]["reason"]


def _trace_verify(entry: str, *files: Path) -> subprocess.CompletedProcess[str]:
    code = (
        f"import sys; from flux7.functions.entry import {entry}; sys.exit({entry}(['trace', 'verify', *sys.argv[1:]]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, files)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "MESH_TRACE_KEY": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("entry", ["main", "mesh7_main"])  # flux7 trace verify, mesh7 trace verify
def test_trace_verify_refuses_what_is_not_a_trace_file(tmp_path: Path, entry: str) -> None:
    db = Database(tmp_path / "flux7.db")
    tracer = Tracer(make_settings(tmp_path), db)
    tracer.record(TraceEntry(agent_id="a", tool="t", params={}, policy="allow", status_code=200))  # an outcome
    db.close()
    good = tmp_path / "traces.jsonl"
    ok = _trace_verify(entry, good)
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("OK"), ok.stdout + ok.stderr
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "plain.jsonl").write_text('{"tool": "t"}\n')  # JSON, but nothing sealed
    cases = {
        tmp_path / "missing.jsonl": "No such file or directory",
        tmp_path: "Is a directory",
        tmp_path / "flux7.db": "an SQLite database",
        tmp_path / "empty.jsonl": "no chained trace lines (0 lines)",
        tmp_path / "notes.txt": "not a JSONL trace file",
        tmp_path / "plain.jsonl": "no chained trace lines (1 lines)",
    }
    for path, words in cases.items():
        result = _trace_verify(entry, path)
        assert result.returncode == 2 and words in result.stderr, (path, result.stdout, result.stderr)
        assert "OK" not in result.stdout
    both = _trace_verify(entry, tmp_path / "missing.jsonl", good)  # one bad file spoils the walk
    assert both.returncode == 2
