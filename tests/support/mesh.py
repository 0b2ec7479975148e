"""A real mesh for tests, in process: its config over the pets backend, and its ASGI app over httpx.

`pets_mesh_config(tmp_path, backend, policy)` writes the spec, one policy file and a config.yaml (admin token
`adm1n` unless told otherwise, `auth.open_loopback` with `admin_token=None` and no `auth:` in `extra`; `memory`
is the config's memory block, off by default, None for the built-in default; `database:` is the test's PostgreSQL
database under `--engine=postgresql` when memory is off, see tests/conftest.py engine_configs) and returns the
config's path.
`in_process(mesh)` starts the mesh, yields an httpx ASGI transport to its app (concurrent requests interleave,
as on a server) and stops it; `mesh_client` wraps that in a client."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import httpx

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from tests.upstreams.servers.http_backend import Backend

__all__ = ["in_process", "mesh_client", "pets_mesh_config"]


# The pets backend governed as most tests want it: reads allowed, writes behind a human, deletes denied.
PETS_POLICY = """
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


def pets_mesh_config(
    tmp_path: Path,
    backend: Backend,
    policy: str,
    *,
    approval_timeout: int = 20,
    admin_token: str | None = "adm1n",
    memory: str | None = "{enabled: false}",
    trace_file: bool = False,
    extra: str = "",
) -> Path:
    (tmp_path / "spec.json").write_text(json.dumps(backend.spec()))
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "agents.yaml").write_text(policy)
    lines = [f"storage_path: {tmp_path}/flux7.db", "policy_dir: policies"]
    database = os.environ.get("FLUX7_TEST_CONFIG_DATABASE", "")
    if database and "database:" not in extra:
        # `--engine=postgresql`: the test's database (tests/conftest.py engine_configs), for in-process meshes
        # that read no environment as well as for server processes.
        lines.append(f"database: {database}")
    if trace_file and not database and "database:" not in extra:
        # PostgreSQL refuses a trace_file: the one chain is in the database
        lines.append(f"trace_file: {tmp_path}/traces.jsonl")
    if admin_token:
        lines.append(f"auth: {{admin_token: {admin_token}}}")
    elif "auth:" not in extra:  # no token asked for: the control plane open to loopback, as before issue 13
        lines.append("auth: {open_loopback: true}")
    lines.append(f"approval: {{timeout_seconds: {approval_timeout}, channel: queue}}")
    if memory is not None:
        lines.append(f"memory: {memory}")
    lines += ["openapi:", "  - file: spec.json", f"    backend_url: {backend.url}", extra]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@contextlib.asynccontextmanager
async def in_process(mesh: Mesh) -> AsyncIterator[httpx.ASGITransport]:
    app = create_app(mesh)
    await mesh.start()
    try:
        yield httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    finally:
        await mesh.stop()


@contextlib.asynccontextmanager
async def mesh_client(mesh: Mesh, headers: Mapping[str, str] | None = None) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        in_process(mesh) as transport,
        httpx.AsyncClient(transport=transport, base_url="http://mesh", headers=headers) as client,
    ):
        yield client
