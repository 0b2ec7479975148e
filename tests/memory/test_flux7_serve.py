"""The memory role inside `flux7 serve`: its routes beside the mesh's, over the mesh's database (SQLite, or the
`database:` URL with `--engine=postgresql`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings


def _app(tmp_path: Path, memory: str, database: str = "") -> tuple[Mesh, TestClient[Any]]:
    cfg = tmp_path / "config.yaml"
    url = f"database: {database}\n" if database else ""
    cfg.write_text(f"storage_path: {tmp_path}/flux7.db\n{url}memory: {memory}\n")
    mesh = Mesh(load_settings(cfg, env={}))
    return mesh, TestClient(create_app(mesh))


def test_memory_routes_share_the_mesh_database_and_default_workspace(tmp_path: Path, database_url: str) -> None:
    mesh, client = _app(tmp_path, "{chain_key: k}", database_url)
    with client:
        assert mesh.memory is not None and mesh.memory.db is mesh.db
        assert mesh.db.engine == ("postgresql" if database_url else "sqlite")
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_store", "arguments": {"key": "k", "value": "v"}},
        }
        answer = client.post("/rpc", json=body).json()
        assert answer["result"]["content"][0]["text"] == "Memory 'k' created (1 total entries)"
        assert client.get("/healthz").json()["status"] == "ok"
        assert client.get("/memory/chain").json()["report"]["keyed"] is True
        search = {**body, "params": {"name": "memory_search", "arguments": {"query": "k"}}}
        assert client.post("/rpc", json=search).json()["result"]["content"][0]["text"].startswith("1 results")
        assert list((tmp_path / "memory" / "workspace" / "memory").glob("*.md"))


def test_the_memory_token_guards_memory_routes_only_when_set(tmp_path: Path) -> None:
    _, client = _app(tmp_path, "{token: mtok}")
    with client:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        assert client.post("/rpc", json=body).status_code == 401
        assert client.post("/rpc", json=body, headers={"Authorization": "Bearer mtok"}).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_memory_off_leaves_no_memory_routes(tmp_path: Path) -> None:
    mesh, client = _app(tmp_path, "{enabled: false}")
    with client:
        assert mesh.memory is None
        assert client.post("/rpc", json={}).status_code == 404
