"""An S3 replica (a fake S3 on loopback, as Fly's Tigris or AWS would answer): `flux7 backup` pushes to it with the
credentials from the environment, `flux7 restore` brings the database back from it, and `flux7 doctor` reports it
reachable, or names it unreachable within its timeout."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux7.shared.store.db import Database
from flux7.shared.tracing.entry import TraceEntry
from flux7.shared.tracing.store import TraceStore
from tests.support.http import free_port

from .s3_fake import FakeS3, running_s3
from .support import LITESTREAM_YML, REPO, run_cli

pytestmark = pytest.mark.served


@pytest.fixture
def s3() -> Iterator[FakeS3]:
    with running_s3() as fake:
        yield fake


def _env(data: Path, replica_url: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FLUX7_DATA": str(data),
        "LITESTREAM_REPLICA_URL": replica_url,
        "AWS_ACCESS_KEY_ID": "flux7test",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
    }
    # Litestream 0.5.17 cannot build its S3 client when a custom CA bundle is named (docs/deploy.md).
    env.pop("AWS_CA_BUNDLE", None)
    return env


def _database(root: Path, data: str, n: int) -> Path:
    cfg = root / f"{data}.yaml"
    cfg.write_text(f"storage_path: {data}/flux7.db\nmemory: {{enabled: false}}\n")
    if n:
        db = Database(root / data / "flux7.db")
        store = TraceStore(db)
        for i in range(n):
            store.record(TraceEntry(trace_id=f"{i:032x}", agent_id="a", tool="t", policy="allow", status_code=200))
        db.close()
    return cfg


def test_backup_to_s3_and_restore_from_it_with_credentials_from_the_environment(tmp_path: Path, s3: FakeS3) -> None:
    url = s3.replica_url("flux7-bucket", "prod/flux7")
    cfg = _database(tmp_path, "data", 12)
    pushed = run_cli("backup", "--config", str(cfg), "--to", url, env=_env(tmp_path / "data", url))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    keys = s3.keys("flux7-bucket")
    assert keys and all(k.startswith("prod/flux7/") and k.endswith(".ltx") for k in keys)
    assert s3.authorizations and all("Credential=flux7test/" in a for a in s3.authorizations)

    restored_cfg = _database(tmp_path, "restored", 0)
    r = run_cli("restore", "--config", str(restored_cfg), "--from", url, env=_env(tmp_path / "restored", url))
    assert r.returncode == 0, r.stdout + r.stderr
    conn = sqlite3.connect(tmp_path / "restored" / "flux7.db")
    assert conn.execute("SELECT count(*) FROM traces").fetchone()[0] == 12
    conn.close()


def test_doctor_reports_an_s3_replica_reachable_and_an_unreachable_one_failed(tmp_path: Path, s3: FakeS3) -> None:
    url = s3.replica_url("flux7-bucket", "flux7")
    cfg = _database(tmp_path, "data", 3)
    env = _env(tmp_path / "data", url)
    assert run_cli("backup", "--config", str(cfg), "--litestream", str(LITESTREAM_YML), env=env).returncode == 0
    args = ("doctor", "--config", str(cfg), "--litestream", str(LITESTREAM_YML), "--skip", "upstreams")
    ok = run_cli(*args, env=env)
    line = next(x for x in ok.stdout.splitlines() if x.startswith("ok") and "replica s3://flux7-bucket" in x)
    assert "LTX files" in line and "snapshot" in line

    closed = f"s3://flux7-bucket/flux7?endpoint=http://127.0.0.1:{free_port()}&region=us-east-1&forcePathStyle=true"
    down = run_cli(*args, "--timeout", "2", env=_env(tmp_path / "data", closed))
    assert down.returncode == 1
    failed = [x for x in down.stdout.splitlines() if x.startswith("FAIL") and "replication" in x]
    assert failed and "unreachable" in failed[0] and "timed out after 2s" in failed[0], down.stdout
    assert "fix: check the replica URL, the bucket and its credentials" in down.stdout
