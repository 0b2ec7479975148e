"""`flux7 backup` and `flux7 restore` on a small database and a `file` replica: push, position, point in time, and a
restore that never overwrites a database nor replays a lost database's WAL onto the restored one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from flux7.shared.store.db import Database
from flux7.shared.tracing.entry import TraceEntry
from flux7.shared.tracing.store import TraceStore

from .support import run_cli

pytestmark = pytest.mark.served


def _config(root: Path, data: str) -> Path:
    cfg = root / f"{data}.yaml"
    cfg.write_text(f"storage_path: {data}/flux7.db\ntrace_file: {data}/traces.jsonl\nmemory: {{enabled: false}}\n")
    return cfg


def _record(db_path: Path, start: int, n: int) -> None:
    db = Database(db_path)
    store = TraceStore(db)
    for i in range(start, start + n):
        store.record(TraceEntry(trace_id=f"{i:032x}", agent_id="a", tool="t", policy="allow", status_code=200))
    db.close()


def _count(db_path: Path) -> int:
    conn = sqlite3.connect(db_path)
    try:
        return int(conn.execute("SELECT count(*) FROM traces").fetchone()[0])
    finally:
        conn.close()


def _status(cfg: Path, url: str) -> dict[str, object]:
    r = run_cli("backup", "--config", str(cfg), "--to", url, "--status", "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_backup_pushes_to_a_replica_and_restore_goes_back_to_any_position(tmp_path: Path) -> None:
    cfg, url = _config(tmp_path, "data"), (tmp_path / "replica").as_uri()
    _record(tmp_path / "data" / "flux7.db", 0, 10)
    assert _status(cfg, url)["position"] == f"{0:016x}"  # an empty replica
    first = run_cli("backup", "--config", str(cfg), "--to", url)
    assert first.returncode == 0 and "backed up" in first.stdout, first.stderr
    early = _status(cfg, url)
    assert int(str(early["position"]), 16) > 0 and "snapshot" in early

    _record(tmp_path / "data" / "flux7.db", 10, 15)
    assert run_cli("backup", "--config", str(cfg), "--to", url).returncode == 0
    late = _status(cfg, url)
    assert int(str(late["position"]), 16) > int(str(early["position"]), 16)

    now = run_cli("restore", "--config", str(_config(tmp_path, "now")), "--from", url)
    assert now.returncode == 0, now.stderr
    assert _count(tmp_path / "now" / "flux7.db") == 25
    # the trace file, re-created from the stored lines, verifies
    verify = run_cli("trace", "verify", str(tmp_path / "now" / "traces.jsonl"))
    assert verify.returncode == 0, verify.stdout + verify.stderr

    then = run_cli(
        "restore", "--config", str(_config(tmp_path, "then")), "--from", url, "--txid", str(early["position"])
    )
    assert then.returncode == 0, then.stderr
    assert _count(tmp_path / "then" / "flux7.db") == 10


def test_restore_never_overwrites_a_database_and_sets_a_lost_ones_wal_aside(tmp_path: Path) -> None:
    cfg, url = _config(tmp_path, "data"), (tmp_path / "replica").as_uri()
    db = tmp_path / "data" / "flux7.db"
    _record(db, 0, 5)
    assert run_cli("backup", "--config", str(cfg), "--to", url).returncode == 0
    before = db.read_bytes()

    refused = run_cli("restore", "--config", str(cfg), "--from", url)
    assert refused.returncode == 1 and "exists: restore only into a missing database" in refused.stderr
    assert db.read_bytes() == before
    skipped = run_cli("restore", "--config", str(cfg), "--from", url, "--if-db-not-exists")
    assert skipped.returncode == 0 and "nothing restored: the database exists" in skipped.stdout

    # The database file is lost but a WAL of other writes is left behind: replaying it would corrupt the restore.
    db.unlink()
    stale = b"\x37\x7f\x06\x82" + b"\x00" * 4092
    (tmp_path / "data" / "flux7.db-wal").write_bytes(stale)
    restored = run_cli("restore", "--config", str(cfg), "--from", url, "--json")
    assert restored.returncode == 0, restored.stderr
    outcome = json.loads(restored.stdout)
    aside = [Path(p) for p in outcome["set_aside"] if Path(p).name.startswith("flux7.db-wal.orphan-")]
    assert outcome["restored"] is True and len(aside) == 1
    assert aside[0].read_bytes() == stale  # moved, never deleted
    assert _count(db) == 5


def test_restore_from_an_empty_replica_fails_unless_told_that_is_fine(tmp_path: Path) -> None:
    cfg, url = _config(tmp_path, "fresh"), (tmp_path / "empty").as_uri()
    failed = run_cli("restore", "--config", str(cfg), "--from", url)
    assert failed.returncode == 1 and "litestream restore failed" in failed.stderr
    assert not (tmp_path / "fresh" / "flux7.db").exists()
    ok = run_cli("restore", "--config", str(cfg), "--from", url, "--if-replica-exists")
    assert ok.returncode == 0 and "nothing restored: the replica is empty" in ok.stdout
