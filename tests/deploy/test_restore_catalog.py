"""`flux7 restore` writes the catalog files back the way it writes the policy files back: the files in
`catalog_dir` are not replicated, their versions in the database are (governance_versions, migration 0018)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from flux7.shared.governance.versions import Versions, materialize_catalog
from flux7.shared.store.db import Database
from tests.support.server import running_server
from tests.upstreams.servers.http_backend import Backend

from .support import env_for, replicated, run_cli, source_for, write_config

CLAUDE = """agents:
  - id: claude
    owner: alice@example.com
    tools: [list_pets]
    lifecycle: active
"""
SUPPORT = """id: support-bot
owner: bob@example.com
team: support
tools: [get_pet_by_id]
lifecycle: active
"""


@pytest.mark.served
def test_a_restore_writes_back_the_catalog_last_loaded_and_sets_aside_what_it_did_not_hold(
    tmp_path: Path, backend: Backend
) -> None:
    data, replica = tmp_path / "data", tmp_path / "replica"
    (tmp_path / "data-catalog").mkdir()
    (tmp_path / "data-catalog" / "agents.yaml").write_text("agents:\n  - id: claude\n    tools: [list_pets]\n")
    config = write_config(tmp_path, "data", backend, "catalog_dir: data-catalog\n", policies="data-policies")
    with replicated(config, data, replica) as server:
        # Control-plane writes, as the console makes them: files on this machine's disk only.
        for name, text in (("agents", CLAUDE), ("support", SUPPORT)):
            r = httpx.put(f"{server.url}/governance/catalog/files/{name}", json={"text": text}, trust_env=False)
            assert r.status_code == 200, r.text
        r = httpx.post(
            f"{server.url}/governance/catalog/claude/lifecycle",
            json={"state": "suspended", "reason": "incident 7"},
            trust_env=False,
        )
        assert r.status_code == 200, r.text
        assert server.caught_up() > 0
        server.kill9()
    written = {p.name: p.read_bytes() for p in (tmp_path / "data-catalog").glob("*.yaml")}
    assert written == {"agents.yaml": CLAUDE.encode(), "support.yaml": SUPPORT.encode()}

    # A fresh machine: the image's default catalog, and a file the replicated deployment never had.
    (tmp_path / "restored-catalog").mkdir()
    (tmp_path / "restored-catalog" / "agents.yaml").write_text("agents: []\n")
    (tmp_path / "restored-catalog" / "stray.yaml").write_text("id: stray\n")
    restored_config = write_config(
        tmp_path, "restored", backend, "catalog_dir: restored-catalog\n", policies="restored-policies"
    )
    restored = tmp_path / "restored"
    r = run_cli(
        "restore",
        "--config",
        str(restored_config),
        "--litestream",
        str(source_for(data, replica).config),
        env=env_for(restored, replica),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "wrote back catalog file(s): agents.yaml, support.yaml" in r.stdout
    assert "set aside catalog file stray.yaml (not in the catalog when the replica was made)" in r.stdout
    catalog = tmp_path / "restored-catalog"
    assert {p.name: p.read_bytes() for p in catalog.glob("*.yaml")} == written
    assert (catalog / "agents.yaml.bak").read_text() == "agents: []\n"  # what it replaced stays beside it
    assert (catalog / "stray.yaml.bak").read_text() == "id: stray\n"

    # The restored deployment knows the agents it knew, in the states they were in, and enforces them.
    with running_server(restored_config) as again:
        listing = httpx.get(f"{again.url}/governance/catalog", trust_env=False).json()
        states = {a["id"]: (a["state"], a["owner"]) for a in listing["agents"]}
        assert states == {"claude": ("suspended", "alice@example.com"), "support-bot": ("active", "bob@example.com")}
        refused = httpx.post(
            f"{again.url}/tool/list_pets",
            json={"params": {}},
            headers={"Authorization": "Bearer agent:claude"},
            trust_env=False,
            timeout=30,
        )
        assert refused.status_code == 403 and "incident 7" in refused.json()["error"], refused.text

    # A second restore run over the same files changes nothing.
    db = Database(restored / "flux7.db", migrate=False)
    try:
        again_out = materialize_catalog(db, catalog)
    finally:
        db.close()
    assert again_out.written == [] and again_out.set_aside == []


def test_materialize_catalog_follows_removals_and_writes_nothing_without_a_record(tmp_path: Path) -> None:
    db = Database(tmp_path / "flux7.db")
    try:
        directory = tmp_path / "catalog"
        directory.mkdir()
        (directory / "keep.yaml").write_text("agents: []\n")
        # No catalog version recorded (no catalog_dir, or a database from before 0018): the files stay.
        out = materialize_catalog(db, directory)
        assert (out.written, out.set_aside) == ([], [])
        assert (directory / "keep.yaml").read_text() == "agents: []\n"

        versions = Versions(db)
        versions.sync("catalog", {"a.yaml": "id: a\n", "b.yaml": "id: b\n", "../evil.yaml": "id: x\n"})
        versions.sync("catalog", {"a.yaml": "id: a2\n", "../evil.yaml": "id: x\n"})  # b.yaml removed since
        assert versions.in_force("catalog") == {"../evil.yaml": "id: x\n", "a.yaml": "id: a2\n"}
        (directory / "b.yaml").write_text("id: b\n")
        out = materialize_catalog(db, directory)
        assert out.written == ["a.yaml"] and sorted(out.set_aside) == ["b.yaml", "keep.yaml"]
        assert sorted(p.name for p in directory.glob("*.yaml")) == ["a.yaml"]
        assert (directory / "a.yaml").read_text() == "id: a2\n"
        assert not (tmp_path / "evil.yaml").exists()  # a name with a path is never written
    finally:
        db.close()
