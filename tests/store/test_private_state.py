"""Small hardening of the server's own state: the data directory is the
owner's alone, names are checked whole, and a NUL byte is a clear refusal, not an internal error."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from flux7.shared.errors import BadRequest
from flux7.shared.gate.policy_edit import PolicyFiles
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from flux7.shared.store.private_files import private_dir
from flux7.shared.tracing.chain import JsonlAppender


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_data_directory_is_0700_and_every_state_file_0600(tmp_path: Path) -> None:
    data = tmp_path / "state" / "data"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"storage_path: {data}/flux7.db\ntrace_file: {data}/traces.jsonl\nmemory: {{hybrid: false}}\n"
        "auth: {admin_token: adm1n}\n"
    )
    mesh = Mesh(load_settings(cfg, env={}))
    await mesh.start()
    try:
        assert mesh.memory is not None
        text, failed = mesh.memory.call_tool("memory_store", {"key": "k", "value": "v"}, authenticated=True)
        assert not failed, text
        mesh.db.execute("CREATE TABLE IF NOT EXISTS probe (x INTEGER)")  # a write: the WAL exists
        assert _mode(data / "flux7.db-wal") == 0o600
        JsonlAppender(data / "traces.jsonl").append(b"{}")
    finally:
        await mesh.stop()
    assert _mode(tmp_path / "state") == _mode(data) == 0o700
    files = [p for p in data.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"flux7.db", "decisions.key", "traces.jsonl", "MEMORY.md"}
    for path in files:
        assert _mode(path) == 0o600, path
    for folder in (p for p in data.rglob("*") if p.is_dir()):
        assert _mode(folder) == 0o700, folder


def test_an_existing_folder_keeps_its_owners_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    private_dir(shared / "a" / "b")
    assert _mode(shared) == 0o755 and _mode(shared / "a") == _mode(shared / "a" / "b") == 0o700


@pytest.mark.parametrize("name", ["pets\n", "pets\n.yaml", "ok\nevil"])
def test_a_policy_or_catalog_name_with_a_newline_is_refused(tmp_path: Path, name: str) -> None:
    cfg = tmp_path / "config.yaml"
    (tmp_path / "policies").mkdir()
    (tmp_path / "catalog").mkdir()
    cfg.write_text(
        f"storage_path: {tmp_path}/flux7.db\npolicy_dir: policies\ncatalog_dir: catalog\nmemory: {{enabled: false}}\n"
    )
    mesh = Mesh(load_settings(cfg, env={}))
    try:
        with pytest.raises(BadRequest, match="invalid catalog file name"):
            mesh.catalog.write_file(name, "agents: []\n", by="owner:admin-token")
        with pytest.raises(BadRequest, match="invalid policy file name"):
            PolicyFiles(mesh.policies).read(name)
    finally:
        mesh.db.close()


def test_memory_get_with_a_nul_byte_says_why(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"storage_path: {tmp_path}/flux7.db\nmemory: {{hybrid: false}}\n")
    mesh = Mesh(load_settings(cfg, env={}))
    try:
        assert mesh.memory is not None
        text, failed = mesh.memory.call_tool("memory_get", {"path": "memory/a\x00b.md"}, authenticated=True)
        assert failed and text == "path must not contain a NUL byte"
        text, failed = mesh.memory.call_tool("memory_store", {"key": "k\x00", "value": "v"}, authenticated=True)
        assert failed and text == "key must not contain a NUL byte"
    finally:
        mesh.db.close()
