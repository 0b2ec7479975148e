"""A real mesh in process (its ASGI app over httpx) with the pets backend, for the agent's tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from functions.app import create_app
from shared.agent.mesh_tools import MeshTools
from shared.mesh import Mesh
from shared.settings import load_settings
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["delete_pet"]
    action: deny
  - tools: ["create_pet"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""


def write_mesh_config(tmp_path: Path, backend: Backend) -> Path:
    (tmp_path / "spec.json").write_text(json.dumps(backend.spec()))
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "agents.yaml").write_text(POLICY)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"""
storage_path: {tmp_path}/flux7.db
policy_dir: policies
auth: {{admin_token: adm1n}}
approval: {{timeout_seconds: 20, channel: queue}}
memory: {{enabled: false}}
openapi:
  - file: spec.json
    backend_url: {backend.url}
"""
    )
    return cfg


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
    await mesh.start()
    try:
        transport = httpx.ASGITransport(app=create_app(mesh), client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://mesh", headers=ADMIN) as admin:
            yield InProcessMesh(mesh, admin, transport)
    finally:
        await mesh.stop()
