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


LISTED = "http://console.example"  # the console origin the hot-path comparisons list


def _hot_and_routed_configs(tmp_path: Path, backend: Backend, hot: str = "hot") -> tuple[Path, Path]:
    """Two configs on one backend: one whose fast paths serve their routes, one where Litestar does (CORS on turns
    the fast paths off)."""
    common = "max_body_bytes: 1024\nauth: {admin_token: adm1n}\n"
    (tmp_path / hot).mkdir()
    (tmp_path / "routed").mkdir()
    hot_cfg = make_config(tmp_path / hot, backend, common)
    routed_cfg = make_config(
        tmp_path / "routed", backend, f"{common}console: {{allowed_origins: ['{LISTED}'], cors: true}}"
    )
    return hot_cfg, routed_cfg


def hot_and_routed(
    tmp_path: Path, backend: Backend, hot_attr: str
) -> Iterator[tuple[TestClient[Any], TestClient[Any]]]:
    """Two apps on one backend: one whose `hot_attr` fast path serves the route, one where Litestar does, for the
    differential tests of functions/hotpath.py and functions/mcp_hotpath.py."""
    hot_cfg, routed_cfg = _hot_and_routed_configs(tmp_path, backend)
    hot_app = create_app(Mesh(load_settings(hot_cfg, env={})))
    routed_app = create_app(Mesh(load_settings(routed_cfg, env={})))
    assert getattr(hot_app, hot_attr, None) is not None and getattr(routed_app, hot_attr, None) is None
    with TestClient(hot_app) as hot, TestClient(routed_app) as routed:
        yield hot, routed


@pytest.fixture
def served(tmp_path: Path, backend: Backend) -> Iterator[tuple[httpx.Client, TestClient[Any]]]:
    """`hot_and_routed` with the fast paths served by `flux7 serve` itself (granian, RSGI: functions/rsgi.py)."""
    served_cfg, routed_cfg = _hot_and_routed_configs(tmp_path, backend, "served")
    routed_app = create_app(Mesh(load_settings(routed_cfg, env={})))
    with (
        running_server(served_cfg) as server,
        httpx.Client(base_url=server.url, trust_env=False, timeout=30) as served,
        TestClient(routed_app) as routed,
    ):
        yield served, routed
