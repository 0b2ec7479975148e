"""A real mesh in process (its ASGI app over httpx) with the pets backend, for the agent's tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flux7.shared.agent.mesh_tools import MeshTools
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.mesh import PETS_POLICY, in_process, pets_mesh_config
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}

POLICY = PETS_POLICY


# A CLI tool too: its name (`clock.run`) has a dot, which no model API accepts in a tool name.
CLOCK = """
cli_tools:
  - name: clock
    bin: date
    bare: {allowed_args: ["-u"], timeout: 5s}
"""


@pytest.fixture(autouse=True)
def _every_mesh_shares_the_engine(engine_configs: str) -> str:
    """`--engine=postgresql`: configs written by pets_mesh_config name this test's PostgreSQL database."""
    return engine_configs


def write_mesh_config(tmp_path: Path, backend: Backend) -> Path:
    return pets_mesh_config(tmp_path, backend, POLICY, extra=CLOCK)


@dataclass
class InProcessMesh:
    mesh: Mesh
    admin: httpx.AsyncClient  # the control plane, with the admin token
    transport: httpx.ASGITransport

    def tools(self, agent_id: str = "coder", session_id: str = "s-1") -> MeshTools:
        return MeshTools("http://mesh", agent_id, session_id=session_id, transport=self.transport)


@contextlib.asynccontextmanager
async def in_process_mesh(config: Path) -> AsyncIterator[InProcessMesh]:
    mesh = Mesh(load_settings(config, env={}))
    async with (
        in_process(mesh) as transport,
        httpx.AsyncClient(transport=transport, base_url="http://mesh", headers=ADMIN) as admin,
    ):
        yield InProcessMesh(mesh, admin, transport)
