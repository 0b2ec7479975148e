"""Real parts for decision-memory tests: a memory service on a temp dir, a mesh with it, servers on loopback."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from functions.app import create_app
from shared.memory.service import MemoryService
from shared.mesh import Mesh
from shared.settings import load_settings
from tests.decisions.support import new_memory_service
from tests.upstreams.servers.http_backend import Backend, running_backend

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}

# get_pet_by_id reads, create_pet writes: both need approval.
POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["get_pet_by_id", "create_pet", "list_pets"]
    action: human_approval
"""


@pytest.fixture
def memory_service(tmp_path: Path) -> Iterator[MemoryService]:
    service = new_memory_service(tmp_path)
    yield service
    service.close()


@pytest.fixture
def backend() -> Iterator[Backend]:
    with running_backend() as b:
        yield b


def mesh_config(tmp_path: Path, backend: Backend, extra: str = "") -> Path:
    (tmp_path / "spec.json").write_text(json.dumps(backend.spec()))
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "agents.yaml").write_text(POLICY)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"""
storage_path: {tmp_path}/flux7.db
policy_dir: policies
auth: {{admin_token: adm1n}}
approval: {{timeout_seconds: 10, channel: queue}}
openapi:
  - file: spec.json
    backend_url: {backend.url}
{extra}
"""
    )
    return cfg


def build_mesh(config: Path) -> Mesh:
    """A mesh as `flux7 serve` builds it: the memory role in process unless memory.url points elsewhere."""
    return Mesh(load_settings(config, env={}))


@contextlib.asynccontextmanager
async def running(mesh: Mesh) -> AsyncIterator[httpx.AsyncClient]:
    """The app in process over httpx's ASGI transport, which lets concurrent requests interleave."""
    app = create_app(mesh)
    await mesh.start()
    try:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://mesh") as client:
            yield client
    finally:
        await mesh.stop()
