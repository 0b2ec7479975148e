"""A real mesh in process (its ASGI app over httpx) and a Supervisor pointed at it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.app import create_app
from shared.mesh import Mesh
from shared.settings import load_settings
from shared.supervisor.config import parse_config
from shared.supervisor.loop import Supervisor
from shared.supervisor.mesh_api import MeshApi
from tests.upstreams.servers.http_backend import Backend, running_backend

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


@pytest.fixture
def backend() -> Iterator[Backend]:
    with running_backend() as b:
        yield b


def write_mesh_config(tmp_path: Path, backend: Backend, extra: str = "") -> Path:
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
{extra}
"""
    )
    return cfg


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

    def supervisor(self, config: Any, **kw: Any) -> Supervisor:
        m = config.mesh
        api = MeshApi(m.url, m.agent_id, admin_token=m.admin_token, transport=self.transport)
        sup = Supervisor(config, mesh=api, **kw)
        sup.open_log()
        return sup


@contextlib.asynccontextmanager
async def world(config: Path) -> AsyncIterator[World]:
    mesh = Mesh(load_settings(config, env={}))
    app = create_app(mesh)
    await mesh.start()
    try:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://mesh") as client:
            yield World(mesh, client, transport)
    finally:
        await mesh.stop()
