"""A pets mesh (tests/support/mesh.py) with a catalog directory, and helpers to make traffic for the purpose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.mesh import PETS_POLICY, pets_mesh_config
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}

# reads allowed, writes behind a human, deletes denied; `rogue` may do everything
POLICY = PETS_POLICY

CATALOG = """
agents:
  - id: claude
    name: Claude the pet clerk
    owner: alice@example.com
    team: pets
    purpose: answer questions about pets
    environment: prod
    model: claude-sonnet
    tools: ["list_pets", "get_pet_by_id"]
    upstreams: ["pets"]
    data_classes: [pii]
    autonomy: supervised
    lifecycle: active
  - id: "batch-*"
    owner: ops@example.com
    tools: ["list_pets"]
    lifecycle: active
"""


def agent(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer agent:{name}"}


def governed_config(
    tmp_path: Path,
    backend: Backend,
    *,
    policy: str = POLICY,
    catalog: str = CATALOG,
    extra: str = "",
    approval_timeout: int = 20,
) -> Path:
    (tmp_path / "catalog").mkdir(exist_ok=True)
    (tmp_path / "catalog" / "agents.yaml").write_text(catalog)
    lines = "catalog_dir: catalog\n" + extra
    return pets_mesh_config(tmp_path, backend, policy, extra=lines, approval_timeout=approval_timeout)


def governed_mesh(tmp_path: Path, backend: Backend, **kw: Any) -> Mesh:
    return Mesh(load_settings(governed_config(tmp_path, backend, **kw), env={}))


async def call(client: httpx.AsyncClient, who: str, tool: str, params: dict[str, Any] | None = None) -> httpx.Response:
    return await client.post(f"/tool/{tool}", json={"params": params or {}}, headers=agent(who))
