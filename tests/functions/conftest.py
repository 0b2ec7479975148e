from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.mesh import pets_mesh_config
from tests.support.server import running_server
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


LISTED = "http://console.example"  # the console origin the fast-path comparisons list


def _pair_config(tmp_path: Path, backend: Backend, folder: str, cors: bool) -> Path:
    (tmp_path / folder).mkdir()
    extra = "max_body_bytes: 1024\nauth: {admin_token: adm1n}\n"
    extra += f"console: {{allowed_origins: ['{LISTED}'], cors: {'true' if cors else 'false'}}}"
    return make_config(tmp_path / folder, backend, extra)


def hot_and_routed(tmp_path: Path, backend: Backend, cors: bool) -> Iterator[tuple[TestClient[Any], TestClient[Any]]]:
    """Two apps of one config on one backend: one whose fast paths (functions/fastpath.py) serve their routes, one
    where Litestar does, for the differential tests of the fast paths; CORS on or off in both."""
    hot_app = create_app(Mesh(load_settings(_pair_config(tmp_path, backend, "hot", cors), env={})))
    routed_app = create_app(
        Mesh(load_settings(_pair_config(tmp_path, backend, "routed", cors), env={})), fast_paths=False
    )
    assert hot_app.fast.route("POST", "/mcp") is not None and routed_app.fast.route("POST", "/mcp") is None
    with TestClient(hot_app) as hot, TestClient(routed_app) as routed:
        yield hot, routed


@pytest.fixture
def served(tmp_path: Path, backend: Backend) -> Iterator[tuple[httpx.Client, TestClient[Any]]]:
    """`hot_and_routed` with the fast paths served by `flux7 serve` itself (granian, RSGI: functions/rsgi.py), CORS
    on (an answer to a request without an Origin is the same as with CORS off)."""
    served_cfg = _pair_config(tmp_path, backend, "served", cors=True)
    routed_app = create_app(
        Mesh(load_settings(_pair_config(tmp_path, backend, "routed", cors=True), env={})), fast_paths=False
    )
    with (
        running_server(served_cfg) as server,
        httpx.Client(base_url=server.url, trust_env=False, timeout=30) as served,
        TestClient(routed_app) as routed,
    ):
        yield served, routed
