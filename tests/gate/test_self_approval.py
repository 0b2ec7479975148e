"""No agent settles its own approval or grants itself, whatever route it takes (issue 13, item 2): the queue
itself refuses (ApprovalQueue.resolve gets the resolver's identity), and each route hands it the identity the
request arrives with. MCP's approval.resolve and grant.create are in tests/mcp_server/test_governance.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from flux7.shared.errors import Forbidden
from flux7.shared.mesh import Mesh
from flux7.shared.supervisor.mesh_api import MeshApi
from tests.support.waiting import eventually

from .conftest import echo_settings
from .test_queue import submit

BOT = {"Authorization": "Bearer agent:bot"}
OTHER = {"Authorization": "Bearer agent:other"}


async def blocked_call(c: httpx.AsyncClient) -> tuple[asyncio.Task[httpx.Response], str]:
    call = asyncio.create_task(c.post("/tool/echo.run", json={"params": {"args": ["hi"]}}, headers=BOT))

    async def listed() -> list[str]:
        return [a["id"] for a in (await c.get("/approvals")).json()]

    (approval_id,) = await eventually(listed, 10, "bot's call to wait for approval")
    return call, approval_id


def test_the_queue_refuses_the_approvals_own_agent(mesh: Mesh) -> None:
    a = submit(mesh, agent="bot")
    for decision in ("approve", "deny"):
        with pytest.raises(Forbidden, match="agent 'bot' cannot resolve its own approval"):
            mesh.approvals.resolve(a.id, decision, resolved_by="mcp:bot", resolver="bot")
    assert mesh.approvals.get(a.id).status == "pending"
    assert mesh.approvals.resolve(a.id, "approve", resolved_by="sup", resolver="sup7").status == "approved"


async def test_rest_resolution_with_the_agents_own_bearer_is_403(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    """`auth.open_loopback` lets any loopback caller in, so the bearer is all that tells the agent apart."""
    c = await client_of(mesh_of(**echo_settings()))
    call, approval_id = await blocked_call(c)
    for action in ("approve", "deny"):
        r = await c.post(f"/approvals/{approval_id}/{action}", json={"resolved_by": "a human, honest"}, headers=BOT)
        assert (r.status_code, r.json()) == (403, {"error": "agent 'bot' cannot resolve its own approval"})
        bodyless = await c.post(f"/approvals/{approval_id}/{action}", headers=BOT)
        assert bodyless.status_code == 403
    assert (await c.get(f"/approvals/{approval_id}")).json()["status"] == "pending"
    assert not call.done()
    ok = await c.post(f"/approvals/{approval_id}/approve", headers=OTHER)
    assert ok.status_code == 200 and ok.json()["status"] == "approved"
    assert (await asyncio.wait_for(call, 10)).status_code == 200


async def test_the_admin_token_resolves_whoever_the_approval_belongs_to(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    c = await client_of(mesh_of(**echo_settings(), auth={"admin_token": "s3cret"}))
    call = asyncio.create_task(c.post("/tool/echo.run", json={"params": {"args": ["hi"]}}, headers=BOT))
    admin = {"Authorization": "Bearer s3cret"}

    async def listed() -> list[str]:
        return [a["id"] for a in (await c.get("/approvals", headers=admin)).json()]

    (approval_id,) = await eventually(listed, 10, "bot's call to wait for approval")
    # the agent's own bearer is not the control plane's credential at all
    assert (await c.post(f"/approvals/{approval_id}/approve", headers=BOT)).status_code == 401
    ok = await c.post(f"/approvals/{approval_id}/approve", headers=admin)
    assert ok.status_code == 200
    assert (await asyncio.wait_for(call, 10)).status_code == 200


async def test_the_supervisor_channel_cannot_settle_its_own_agents_call(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    """sup7 without an admin token speaks as `agent:<its id>`: a call of that very agent is not its to settle."""
    mesh = mesh_of(**echo_settings())
    c = await client_of(mesh)
    call, approval_id = await blocked_call(c)
    transport = httpx.ASGITransport(c._transport.app, client=("127.0.0.1", 40001))  # type: ignore[attr-defined]
    as_bot = MeshApi("http://mesh", "bot", transport=transport)
    as_sup = MeshApi("http://mesh", "sup7", transport=transport)
    try:
        kwargs = {"resolved_by": "supervisor:x", "reasoning": "fine", "confidence": 0.9}
        assert await as_bot.resolve(approval_id, "approve", **kwargs) == 403  # type: ignore[arg-type]
        assert mesh.approvals.get(approval_id).status == "pending"
        assert await as_sup.resolve(approval_id, "approve", **kwargs) == 200  # type: ignore[arg-type]
    finally:
        await as_bot.aclose()
        await as_sup.aclose()
    assert (await asyncio.wait_for(call, 10)).status_code == 200


async def test_an_agent_cannot_grant_itself_over_rest(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    mesh = mesh_of(**echo_settings())
    c = await client_of(mesh)
    for agent in ("bot", "b*", "*"):
        r = await c.post("/grants", json={"agent": agent, "tools": "*", "duration": "1h"}, headers=BOT)
        assert r.status_code == 403 and r.json()["error"].startswith("agent 'bot' cannot grant itself"), agent
    assert mesh.grants.active() == []
    ok = await c.post("/grants", json={"agent": "other", "tools": "echo.*", "duration": "1h"}, headers=BOT)
    assert ok.status_code == 201
    anonymous = await c.post("/grants", json={"agent": "*", "tools": "echo.*", "duration": "1h"})
    assert anonymous.status_code == 201  # an operator on the open loopback control plane, as configured
