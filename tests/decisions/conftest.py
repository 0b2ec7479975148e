"""Real parts for decision-memory tests: a memory service on a temp dir, a mesh with it, servers on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flux7.shared.memory.service import MemoryService
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database
from tests.decisions.support import new_memory_service
from tests.support import postgres
from tests.support.mesh import mesh_client as running
from tests.support.mesh import pets_mesh_config
from tests.upstreams.servers.http_backend import Backend

__all__ = ["ADMIN", "AGENT", "build_mesh", "mesh_config", "running"]  # `running`: the shared in-process client

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
def memory_service(tmp_path: Path, store: Database) -> Iterator[MemoryService]:
    """The memory role on the engine's store (tests/conftest.py `store`)."""
    service = new_memory_service(tmp_path, store)
    yield service
    service.close()


def mesh_config(tmp_path: Path, backend: Backend, extra: str = "") -> Path:
    return pets_mesh_config(tmp_path, backend, POLICY, approval_timeout=10, memory=None, extra=extra)


def build_mesh(config: Path) -> Mesh:
    """A mesh as `flux7 serve` builds it: the memory role in process unless memory.url points elsewhere."""
    return Mesh(load_settings(config, env={}))


@pytest.fixture
def separate_databases(engine: str, request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """Each call: the `database` setting of one more deployment with a store of its own ("" on SQLite, where
    each keeps its storage_path; on PostgreSQL a fresh database, dropped after the test)."""
    made: list[str] = []
    admin = str(request.getfixturevalue("postgres_admin_url")) if engine == "postgresql" else ""

    def new() -> str:
        if not admin:
            return ""
        made.append(postgres.create_database(admin))
        return made[-1]

    yield new
    for url in made:
        postgres.drop_database(admin, url)
