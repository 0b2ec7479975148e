"""The policy files' copy in the database: recorded when a set loads, written back by a restore."""

from __future__ import annotations

import os
from pathlib import Path

from flux7.shared.gate.policy_files import materialize, snapshot
from flux7.shared.gate.policy_store import PolicyStore
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database

AGENTS = "name: agents\nagent: '*'\nrules:\n  - tools: ['*']\n    action: deny\n"
CLAUDE = "name: claude\nagent: claude\nrules:\n  - tools: ['read_*']\n    action: allow\n"


def rows(db: Database) -> dict[str, bytes]:
    return {str(n): bytes(c) for n, c in db.query("SELECT name, content FROM policy_files")}


def test_snapshot_records_new_changed_and_removed_files_and_writes_nothing_when_unchanged(
    tmp_path: Path, store: Database
) -> None:
    db = store
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "agents.yaml").write_text(AGENTS)
    (policies / "notes.txt").write_text("not a policy")
    assert snapshot(db, policies) is True
    assert rows(db) == {"agents.yaml": AGENTS.encode()}
    assert snapshot(db, policies) is False  # unchanged: no write transaction at all
    (policies / "claude.yaml").write_text(CLAUDE)
    (policies / "agents.yaml").write_text(AGENTS.replace("deny", "human_approval"))
    assert snapshot(db, policies) is True
    assert rows(db) == {
        "agents.yaml": AGENTS.replace("deny", "human_approval").encode(),
        "claude.yaml": CLAUDE.encode(),
    }
    (policies / "claude.yaml").unlink()
    assert snapshot(db, policies) is True
    assert set(rows(db)) == {"agents.yaml"}
    db.close()


def test_materialize_puts_back_the_recorded_set_and_keeps_what_it_replaces(tmp_path: Path, store: Database) -> None:
    db = store
    live = tmp_path / "live"
    live.mkdir()
    (live / "agents.yaml").write_text(AGENTS)
    (live / "claude.yaml").write_text(CLAUDE)
    snapshot(db, live)

    fresh = tmp_path / "fresh"  # a new machine: the image's defaults, one of them not in force any more
    fresh.mkdir()
    (fresh / "agents.yaml").write_text("name: agents\nrules:\n  - tools: ['*']\n    action: allow\n")
    (fresh / "example.yaml").write_text("name: example\nrules: []\n")
    done = materialize(db, fresh)
    assert sorted(done.written) == ["agents.yaml", "claude.yaml"] and done.set_aside == ["example.yaml"]
    assert sorted(p.name for p in fresh.glob("*.yaml")) == ["agents.yaml", "claude.yaml"]
    assert (fresh / "agents.yaml").read_text() == AGENTS and (fresh / "claude.yaml").read_text() == CLAUDE
    assert "allow" in (fresh / "agents.yaml.bak").read_text()  # the replaced default, kept
    assert (fresh / "example.yaml.bak").exists()
    assert materialize(db, fresh).written == []  # already in step
    db.close()


def test_materialize_does_nothing_without_a_record_and_never_writes_outside_the_directory(
    tmp_path: Path, store: Database
) -> None:
    db = store
    target = tmp_path / "policies"
    target.mkdir()
    (target / "agents.yaml").write_text(AGENTS)
    assert materialize(db, target).written == [] and (target / "agents.yaml").read_text() == AGENTS
    with db.write() as conn:  # a database from before the table (an older replica)
        conn.execute("ALTER TABLE policy_files RENAME TO policy_files_later")
    assert materialize(db, target).written == []
    with db.write() as conn:
        conn.execute("ALTER TABLE policy_files_later RENAME TO policy_files")
    with db.write() as conn:  # a tampered row naming a path
        conn.execute(
            "INSERT INTO policy_files (name, content, sha256, updated_at) VALUES ('../evil.yaml', ?, '', 0)", (b"\0",)
        )
    done = materialize(db, target)
    assert done.written == [] and not (tmp_path / "evil.yaml").exists()
    assert done.set_aside == [] and (target / "agents.yaml").read_text() == AGENTS  # nothing usable: nothing moved
    db.close()


def test_the_policy_store_records_each_set_that_loads_and_not_a_broken_one(tmp_path: Path, store: Database) -> None:
    (tmp_path / "policies").mkdir()
    policy = tmp_path / "policies" / "agents.yaml"
    policy.write_text(AGENTS)
    config = tmp_path / "config.yaml"
    config.write_text(f"storage_path: {tmp_path}/flux7.db\npolicy_dir: policies\nmemory: {{enabled: false}}\n")
    db = store
    store = PolicyStore(load_settings(config, env={}), db)
    assert rows(db) == {"agents.yaml": AGENTS.encode()}  # recorded at start

    def edit(text: str) -> None:
        policy.write_text(text)
        st = policy.stat()
        os.utime(policy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    edit(AGENTS.replace("deny", "allow"))
    assert store.reload_if_changed() is True
    assert rows(db)["agents.yaml"] == AGENTS.replace("deny", "allow").encode()
    edit("name: agents\nrules: [{tools: ['*'], action: maybe}]\n")
    assert store.reload_if_changed() is False and store.last_error
    assert rows(db)["agents.yaml"] == AGENTS.replace("deny", "allow").encode()  # the set in force, not the broken file
    db.close()
