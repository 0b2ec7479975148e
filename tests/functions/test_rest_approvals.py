from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import ADMIN, AGENT, make_config
from tests.support.mesh import mesh_client as running
from tests.support.waiting import eventually
from tests.upstreams.servers.http_backend import Backend


async def pending_id(client: httpx.AsyncClient, tool: str, timeout: float = 10.0) -> str:
    async def first() -> str:
        r = await client.get("/approvals", params={"status": "pending", "tool": tool}, headers=ADMIN)
        items = r.json()
        return str(items[0]["id"]) if items else ""

    return str(await eventually(first, timeout, f"a pending approval of {tool}"))


async def test_a_call_needing_approval_blocks_until_approved_then_forwards(tmp_path: Path, backend: Backend) -> None:
    mesh = Mesh(load_settings(make_config(tmp_path, backend, "auth: {admin_token: adm1n}"), env={}))
    async with running(mesh) as client:
        call = asyncio.create_task(client.post("/tool/create_pet", json={"params": {"name": "Kit"}}, headers=AGENT))
        approval = await pending_id(client, "create_pet")
        assert not call.done()
        assert not [r for r in backend.requests if r.method == "POST"]  # nothing forwarded while pending
        r = await client.post(
            f"/approvals/{approval}/approve", json={"resolved_by": "ann", "reasoning": "ok"}, headers=ADMIN
        )
        assert r.status_code == 200
        resp = await asyncio.wait_for(call, 10)
        assert resp.status_code == 200
        body = resp.json()
        assert body["policy"] == "human_approval" and body["approval_id"] == approval
        assert body["result"] == {"created": {"name": "Kit"}}
        [t] = (await client.get("/traces", params={"trace": body["trace_id"]}, headers=ADMIN)).json()
        assert (
            t["approval_status"] == "approved" and t["approved_by"] == "owner:admin-token" and t["status_code"] == 201
        )


async def test_a_denied_approval_returns_403_naming_the_resolver(tmp_path: Path, backend: Backend) -> None:
    mesh = Mesh(load_settings(make_config(tmp_path, backend, "auth: {admin_token: adm1n}"), env={}))
    async with running(mesh) as client:
        call = asyncio.create_task(client.post("/tool/create_pet", json={"name": "Kit"}, headers=AGENT))
        approval = await pending_id(client, "create_pet")
        await client.post(f"/approvals/{approval}/deny", json={"resolved_by": "bob"}, headers=ADMIN)
        resp = await asyncio.wait_for(call, 10)
        assert resp.status_code == 403
        assert resp.json()["error"] == "approval denied by owner:admin-token" and resp.json()["approval_id"] == approval
        assert not [r for r in backend.requests if r.method == "POST"]


async def test_an_unresolved_approval_times_out_with_408(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}")
    cfg.write_text(cfg.read_text().replace("timeout_seconds: 5", "timeout_seconds: 0.5"))
    mesh = Mesh(load_settings(cfg, env={}))
    async with running(mesh) as client:
        resp = await client.post("/tool/create_pet", json={"name": "Kit"}, headers=AGENT)
        assert resp.status_code == 408 and resp.json()["error"] == "approval timed out"
        a = (await client.get(f"/approvals/{resp.json()['approval_id']}", headers=ADMIN)).json()
        assert a["status"] == "timeout" and a["resolved_by"] == "system:timeout"
