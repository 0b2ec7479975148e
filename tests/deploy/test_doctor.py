"""`flux7 doctor`: a healthy deployment gets a clean bill; a broken one gets each fault named with its fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux7.shared.gate.policy_files import snapshot
from flux7.shared.store.db import Database
from tests.support.http import free_port
from tests.upstreams.servers.http_backend import Backend

from .support import LITESTREAM_YML, REPO, env_for, replicated, run_cli, write_config

pytestmark = pytest.mark.served


def _lines(out: str, mark: str, area: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(mark) and line.split()[1] == area]


def test_doctor_finds_a_replicated_deployment_healthy(tmp_path: Path, backend: Backend) -> None:
    data, replica = tmp_path / "data", tmp_path / "replica"
    cfg = write_config(tmp_path, "data", backend, hybrid=True)  # so the embedding model loads and embeds
    with replicated(cfg, data, replica) as server:
        server.caught_up()
        env = env_for(data, replica)
        r = run_cli("doctor", "--config", str(cfg), "--litestream", str(LITESTREAM_YML), env=env)
        # with the daemon running, `flux7 backup` asks it to push rather than writing the replica itself
        pushed = run_cli("backup", "--config", str(cfg), "--litestream", str(LITESTREAM_YML), env=env)
        assert pushed.returncode == 0 and "sync by the running litestream" in pushed.stdout, pushed.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.rstrip().endswith("healthy, 0 warning(s)"), out
    assert _lines(out, "ok", "database") and "journal wal" in _lines(out, "ok", "database")[0]
    replication = _lines(out, "ok", "replication")
    assert any("litestream 0.5.17" in line and replica.as_uri() in line for line in replication), out
    assert any("daemon answers" in line for line in replication), out
    assert "1 files, the same as the database's copy" in _lines(out, "ok", "policies")[0]
    assert "384-dim vector" in _lines(out, "ok", "embeddings")[0]
    assert "backend answers (HTTP" in _lines(out, "ok", "upstreams")[0]


def test_doctor_names_every_broken_part_with_its_fix_and_exits_1(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "spec.json").write_text('{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {}}')
    (tmp_path / "config.yaml").write_text(
        f"""
host: 0.0.0.0
storage_path: data/flux7.db
auth: {{allow_claimed_identity: true}}
memory: {{enabled: true, hybrid: false}}
openapi:
  - file: spec.json
    backend_url: {closed}
mcp_servers:
  - name: gone
    transport: streamable-http
    url: {closed}/mcp
cli_tools:
  - name: nothere
    bin: flux7-no-such-binary
"""
    )
    # a database written by a newer flux7 (a migration this one lacks)
    db = Database(tmp_path / "data" / "flux7.db")
    db.execute("INSERT INTO schema_migrations (name, applied_at) VALUES ('9999_future.sql', 'now')")
    db.close()
    env = {**env_for(tmp_path / "data", tmp_path / "replica"), "LITESTREAM_REPLICA_URL": ""}  # replica unset
    env.pop("MESH_ADMIN_TOKEN", None)
    r = run_cli(
        "doctor",
        "--config",
        str(tmp_path / "config.yaml"),
        "--litestream",
        str(LITESTREAM_YML),
        "--timeout",
        "2",
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert any("requires an admin token" in line for line in _lines(out, "FAIL", "config")), out
    assert any("memory.token is empty" in line for line in _lines(out, "WARN", "config")), out
    assert any("allow_claimed_identity" in line for line in _lines(out, "WARN", "config")), out
    assert any("9999_future.sql" in line for line in _lines(out, "FAIL", "database")), out
    assert any("no url, path or bucket" in line for line in _lines(out, "FAIL", "replication")), out
    upstreams = "\n".join(_lines(out, "FAIL", "upstreams"))
    assert "mcp gone" in upstreams and f"backend {closed} unreachable" in upstreams
    assert "cli nothere: flux7-no-such-binary not found" in upstreams
    assert "fix: set the MESH_ADMIN_TOKEN secret" in out
    assert out.rstrip().endswith("warning(s)") and "problem(s) to fix" in out


def test_doctor_reports_a_config_it_cannot_load_by_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("approval:\n  timeout: 5\n")
    r = run_cli("doctor", "--config", str(cfg), "--json")
    assert r.returncode == 1
    assert '"healthy": false' in r.stdout and str(cfg) in r.stdout and "approval" in r.stdout


def test_doctor_reports_an_unreadable_database_as_broken(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "flux7.db").write_bytes(b"not a database at all" * 100)
    (tmp_path / "config.yaml").write_text("storage_path: data/flux7.db\nmemory: {enabled: false}\n")
    r = run_cli("doctor", "--config", str(tmp_path / "config.yaml"), "--skip", "upstreams", "--skip", "replication")
    assert r.returncode == 1, r.stdout
    failed = _lines(r.stdout, "FAIL", "database")
    assert failed and "flux7.db" in failed[0], r.stdout
    assert "fix: restore it: flux7 restore" in r.stdout


def test_doctor_warns_when_the_policy_files_differ_from_the_copy_a_restore_would_write(
    tmp_path: Path, backend: Backend
) -> None:
    data, replica = tmp_path / "data", tmp_path / "replica"
    cfg = write_config(tmp_path, "data", backend)
    with replicated(cfg, data, replica) as server:
        server.caught_up()
    (tmp_path / "policies" / "agents.yaml").write_text("name: agents\nrules: []\n")  # edited while it was down
    (tmp_path / "policies" / "extra.yaml").write_text("name: extra\nrules: []\n")
    r = run_cli(
        "doctor", "--config", str(cfg), "--skip", "replication", "--skip", "upstreams", env=env_for(data, replica)
    )
    assert r.returncode == 0, r.stdout + r.stderr  # a warning, not a failure
    warned = _lines(r.stdout, "WARN", "policies")
    assert warned and "differs from the database's copy: agents.yaml, extra.yaml" in warned[0], r.stdout


def test_doctor_compares_the_catalog_files_with_the_copy_a_restore_would_write(tmp_path: Path) -> None:
    (tmp_path / "catalog").mkdir()
    (tmp_path / "catalog" / "claude.yaml").write_text("agents:\n  - id: claude\n    owner: ann\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("storage_path: data/flux7.db\ncatalog_dir: catalog\nmemory: {enabled: false}\n")
    db = Database(tmp_path / "data" / "flux7.db")
    try:
        snapshot(db, tmp_path / "catalog", "catalog_files")  # as the server records the catalog it loaded
    finally:
        db.close()
    args = ("doctor", "--config", str(cfg), "--skip", "replication", "--skip", "upstreams")
    r = run_cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{tmp_path / 'catalog'}: 1 files, the same as the database's copy" in _lines(r.stdout, "ok", "catalog")[0]
    assert not _lines(r.stdout, "ok", "policies")  # no policy_dir: nothing to compare

    (tmp_path / "catalog" / "claude.yaml").write_text("agents:\n  - id: claude\n    owner: bob\n")  # edited while down
    r = run_cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr  # a warning, not a failure
    warned = _lines(r.stdout, "WARN", "catalog")
    assert warned and "differs from the database's copy: claude.yaml" in warned[0], r.stdout
    assert "a restore now would write back the database's copy" in r.stdout
    skipped = run_cli(*args, "--skip", "catalog")
    assert skipped.returncode == 0 and not _lines(skipped.stdout, "WARN", "catalog"), skipped.stdout


def test_doctor_warns_that_a_policy_set_without_a_rule_denies_every_call(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("storage_path: data/flux7.db\nmemory: {enabled: false}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLUX7_CONFIG": ""}
    args = ("doctor", "--skip", "replication", "--skip", "upstreams")
    r = run_cli(*args, env=env, cwd=tmp_path)  # no --config: ./config.yaml, found and named
    assert r.returncode == 0, r.stdout + r.stderr  # a warning, by the doctor's convention
    config = _lines(r.stdout, "ok", "config")[0]
    assert f"{tmp_path / 'config.yaml'} (found in the current folder" in config and "0 policies, 0 rules" in config
    (warned,) = _lines(r.stdout, "WARN", "policies")
    assert "no policies: every tool call is denied" in warned
    assert "fix: add a policy_dir" in r.stdout and r.stdout.rstrip().endswith("warning(s)")

    (tmp_path / "config.yaml").write_text(
        "storage_path: data/flux7.db\nmemory: {enabled: false}\npolicies:\n  - {name: empty, rules: []}\n"
    )
    r = run_cli(*args, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "no policy has a rule: every tool call is denied" in r.stdout, r.stdout
    skipped = run_cli(*args, "--skip", "policies", env=env, cwd=tmp_path)
    assert not _lines(skipped.stdout, "WARN", "policies"), skipped.stdout
