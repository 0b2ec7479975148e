"""A real mesh in process (its ASGI app over httpx) and a Supervisor pointed at it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from flux7.shared.supervisor.config import parse_config
from flux7.shared.supervisor.loop import Supervisor
from flux7.shared.supervisor.mesh_api import MeshApi
from tests.support.mesh import in_process, pets_mesh_config
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["create_pet", "get_pet_by_id"]
    action: human_approval
  - tools: ["list_pets"]
    action: allow
"""

RULES = [
    {"name": "secrets", "condition": "params.path contains .ssh", "action": "escalate", "confidence": 1.0},
    {"name": "forbidden", "condition": "params.name equals Voldemort", "action": "deny", "confidence": 0.99},
    {"name": "unsure", "condition": "params.name starts_with maybe", "action": "approve", "confidence": 0.5},
    {
        "name": "project-files",
        "condition": "params.path starts_with project_dir",
        "action": "approve",
        "description": "inside the project",
    },
]


@pytest.fixture(autouse=True)
def _every_mesh_shares_the_engine(engine_configs: str) -> str:
    """`--engine=postgresql`: configs written by pets_mesh_config name this test's PostgreSQL database."""
    return engine_configs


def write_mesh_config(tmp_path: Path, backend: Backend, extra: str = "") -> Path:
    """sup7's agent (`supervisor`) is a supervisor agent of this mesh: its own token proves it (World.supervisor)."""
    if "supervisor:" not in extra:
        extra = "supervisor: {supervisor_agents: [supervisor]}\n" + extra
    return pets_mesh_config(tmp_path, backend, POLICY, extra=extra)


def sup7_config(tmp_path: Path, **over: Any) -> Any:
    data: dict[str, Any] = {
        "mesh": {"url": "http://mesh", "agent_id": "supervisor", "admin_token": "adm1n"},
        "evaluator": {"provider": "none", "confidence_threshold": 0.8},
        "poll": {"interval": "50ms"},
        "rules": RULES,
        "project_dirs": ["/home/u/proj"],
        "decision_log": str(tmp_path / "sup7-decisions.jsonl"),
    }
    for key, value in over.items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
    return parse_config(data)


@dataclass
class World:
    mesh: Mesh
    client: httpx.AsyncClient
    transport: httpx.ASGITransport

    def supervisor(self, config: Any, *, own_token: bool = True, **kw: Any) -> Supervisor:
        """sup7 as it runs in production: with its own agent token (`flux7 token issue <agent_id>`) unless the
        config names one or `own_token` is False, so its decisions are recorded as `supervisor:<agent_id>`."""
        m = config.mesh
        token = m.token or (self.mesh.tokens.issue(m.agent_id).token if own_token else "")
        api = MeshApi(m.url, m.agent_id, token=token, admin_token=m.admin_token, transport=self.transport)
        sup = Supervisor(config, mesh=api, **kw)
        sup.open_log()
        return sup


@contextlib.asynccontextmanager
async def world(config: Path) -> AsyncIterator[World]:
    mesh = Mesh(load_settings(config, env={}))
    async with (
        in_process(mesh) as transport,
        httpx.AsyncClient(transport=transport, base_url="http://mesh") as client,
    ):
        yield World(mesh, client, transport)
