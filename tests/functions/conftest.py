from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.mesh import pets_mesh_config
from tests.upstreams.servers.http_backend import Backend

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["get_pet_by_id"]
    action: deny
    condition: {field: petId, operator: "==", value: "2"}
  - tools: ["list_pets", "get_*", "echo_headers"]
    action: allow
  - tools: ["delete_pet"]
    action: deny
  - tools: ["create_pet", "put_notes_noteId"]
    action: human_approval
"""


@pytest.fixture(autouse=True)
def _every_mesh_shares_the_engine(engine_env: str) -> str:
    """`--engine=postgresql`: configs written by pets_mesh_config name this test's PostgreSQL database."""
    return engine_env


def make_config(tmp_path: Path, backend: Backend, extra: str = "") -> Path:
    return pets_mesh_config(
        tmp_path, backend, POLICY, approval_timeout=5, admin_token=None, trace_file=True, extra=extra
    )


@pytest.fixture
def config(tmp_path: Path, backend: Backend) -> Path:
    return make_config(tmp_path, backend, "auth: {admin_token: adm1n}")


ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}


@pytest.fixture
def client(config: Path) -> Iterator[TestClient[Any]]:
    mesh = Mesh(load_settings(config, env={}))
    with TestClient(create_app(mesh)) as c:
        yield c
