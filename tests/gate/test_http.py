"""The control-plane routes (CONTRACT 1.6, 1.8-1.10, 1.13) and the blocking /tool path, in process.

As an operator would: with an admin token (the default since issue 13), sent by every client here unless a
request names its own `Authorization` (the agents' data-plane calls)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from flux7.shared.mesh import Mesh
from tests.support.waiting import eventually

from .conftest import echo_settings

AGENT = {"Authorization": "Bearer agent:bot"}
JSON = {"Content-Type": "application/json"}
TOKEN = "http-adm1n"


@pytest.fixture
def mesh_of(mesh_of: Callable[..., Mesh]) -> Callable[..., Mesh]:
    """conftest's, with an admin token unless a test configures auth itself."""

    def make(**overrides: Any) -> Mesh:
        return mesh_of(**{"auth": {"admin_token": TOKEN}, **overrides})

    return make


@pytest.fixture
def client_of(client_of: Any) -> Any:
    """conftest's, sending the admin token unless told otherwise."""

    async def make(m: Mesh, peer: str = "127.0.0.1", **headers: str) -> httpx.AsyncClient:
        return await client_of(m, peer, **{"Authorization": f"Bearer {TOKEN}", **headers})

    return make


async def pending_ids(c: httpx.AsyncClient, count: int = 1, timeout: float = 10) -> list[str]:
    async def listed() -> list[str]:
        items = (await c.get("/approvals")).json()
        return [a["id"] for a in items] if len(items) >= count else []

    ids: list[str] = await eventually(listed, timeout, "a pending approval")
    return ids


async def test_supervisor_protocol_list_detail_resolve(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    mesh = mesh_of(**echo_settings())
    c = await client_of(mesh)
    mesh.grants.create("bot", "fs.*", 600, granted_by="h")
    call = asyncio.create_task(c.post("/tool/echo.run", json={"params": {"args": ["hi"]}}, headers=AGENT))
    (approval_id,) = await pending_ids(c)
    listed = (await c.get("/approvals", params={"status": "pending", "tool": "echo.*"})).json()
    assert [a["id"] for a in listed] == [approval_id]
    assert (await c.get("/approvals", params={"tool": "fs.*"})).json() == []
    detail = (await c.get(f"/approvals/{approval_id[:8]}")).json()
    assert detail["agent_id"] == "bot" and detail["params"] == {"args": ["hi"]}
    assert detail["recent_traces"][0]["approval_id"] == approval_id
    assert [g["tools"] for g in detail["active_grants"]] == ["fs.*"]
    body = {"resolved_by": "supervisor:sup7", "reasoning": "echo is harmless", "confidence": 0.95}
    r = await c.post(f"/approvals/{approval_id}/approve", json=body)
    assert (r.status_code, r.json()) == (200, {"status": "approved", "id": approval_id})
    res = await asyncio.wait_for(call, 10)
    assert res.status_code == 200 and res.json()["approval_id"] == approval_id
    assert res.json()["result"]["stdout"] == "hi\n"
    trace = (await c.get("/traces", params={"trace": res.json()["trace_id"]})).json()[0]
    # the resolver is the credential (the admin token); what the body said is a note, and it makes the decision
    # a supervisor's, never a human's
    assert trace["approved_by"] == "owner:admin-token"
    settled = (await c.get(f"/approvals/{approval_id}")).json()
    assert (settled["resolved_by"], settled["resolved_note"]) == ("owner:admin-token", "supervisor:sup7")
    [decision] = (await c.get("/approvals/decisions")).json()["decisions"]
    assert decision["resolver_kind"] == "supervisor"
    assert trace["supervisor_reasoning"] == "echo is harmless" and trace["supervisor_confidence"] == 0.95
    again = await c.post(f"/approvals/{approval_id}/deny")
    assert (again.status_code, again.json()) == (409, {"error": "approval already resolved"})


async def test_a_denied_approval_answers_403_with_the_resolver(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    c = await client_of(mesh_of(**echo_settings()))
    call = asyncio.create_task(c.post("/tool/echo.run", json={"args": ["x"]}, headers=AGENT))
    (approval_id,) = await pending_ids(c)
    r = await c.post(f"/approvals/{approval_id}/deny", json={"resolved_by": "alice"})  # a note, not the resolver
    assert r.status_code == 200
    res = await asyncio.wait_for(call, 10)
    assert res.status_code == 403
    assert res.json()["error"] == "approval denied by owner:admin-token"


async def test_an_approval_timeout_answers_408(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    c = await client_of(mesh_of(**echo_settings(), approval={"timeout_seconds": 0.2}))
    res = await c.post("/tool/echo.run", json={"args": ["x"]}, headers=AGENT)
    assert (res.status_code, res.json()["error"]) == (408, "approval timed out")
    listed = (await c.get("/approvals", params={"status": "all"})).json()
    assert listed[0]["status"] == "timeout" and listed[0]["resolved_by"] == "system:timeout"


async def test_a_grant_lifts_approval_and_a_stop_blocks_before_it(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    c = await client_of(mesh_of(**echo_settings()))
    r = await c.post("/grants", json={"agent": "bot", "tools": "echo.*", "duration": "10m"})
    assert r.status_code == 201 and r.json()["granted_by"] == "owner:admin-token"
    res = await c.post("/tool/echo.run", json={"args": ["go"]}, headers=AGENT)
    assert res.status_code == 200 and res.json()["policy"] == "allow"
    stop = await c.post("/halts", json={"scope": "agent", "target": "bot", "reason": "drill", "by": "ops"})
    assert stop.status_code == 201
    assert stop.json()["revoked_grants"] == 1 and stop.json()["halt"]["created_by"] == "owner:admin-token"
    blocked = await c.post("/tool/echo.run", json={"args": ["go"]}, headers=AGENT)
    assert blocked.status_code == 403 and blocked.json()["policy"] == "halted"
    assert "drill" in blocked.json()["error"]
    assert (await c.get("/grants")).json() == []
    same = await c.post("/halts", json={"scope": "agent", "target": "bot"})
    assert same.status_code == 200 and same.json()["already_active"] is True
    halt_id = stop.json()["halt"]["id"]
    assert [h["id"] for h in (await c.get("/halts")).json()] == [halt_id]
    resumed = await c.post(f"/halts/{halt_id}/resume", json={"by": "ops"})
    assert resumed.status_code == 200 and resumed.json()["restored_grants"] == 1
    assert (await c.get("/halts")).json() == []
    assert [h["id"] for h in (await c.get("/halts", params={"status": "all"})).json()] == [halt_id]
    assert (await c.post("/tool/echo.run", json={"args": ["go"]}, headers=AGENT)).status_code == 200
    assert (await c.post("/halts/0000000000000000/resume")).status_code == 404
    events = [t for t in (await c.get("/traces")).json() if t["tool"].startswith("mesh.")]
    # control-plane events name their actor as the entry's user: an operator is never listed as an agent
    assert [(t["tool"], t.get("user_id"), t["agent_id"]) for t in events] == [
        ("mesh.resume", "owner:admin-token", ""),
        ("mesh.halt", "owner:admin-token", ""),
        ("mesh.grant", "owner:admin-token", ""),
    ]


async def test_a_rate_limited_call_answers_429(mesh_of: Callable[..., Mesh], client_of: Any) -> None:
    limited = {
        "name": "lim",
        "agent": "*",
        "rate_limit": {"max_per_minute": 2},
        "rules": [{"tools": ["*"], "action": "allow"}],
    }
    c = await client_of(mesh_of(cli_tools=echo_settings()["cli_tools"], policies=[limited]))
    codes = [(await c.post("/tool/echo.run", json={"args": [str(i)]}, headers=AGENT)).status_code for i in range(3)]
    assert codes == [200, 200, 429]
    last = await c.post("/tool/echo.run", json={"args": ["z"]}, headers=AGENT)
    assert last.json()["policy"] == "rate_limited"
    assert last.json()["error"] == 'rate_limit: agent "bot" exceeded 2 calls/min'


async def test_grant_routes_validate_and_revoke_by_prefix(mesh: Mesh, client_of: Any) -> None:
    c = await client_of(mesh)
    missing = await c.post("/grants", json={"agent": "bot", "duration": "5m"})
    assert (missing.status_code, missing.json()) == (400, {"error": "agent, tools, and duration are required"})
    bad = await c.post("/grants", json={"agent": "bot", "tools": "*", "duration": "soon"})
    assert bad.status_code == 400 and bad.json()["error"].startswith("invalid duration: ")
    assert (await c.post("/grants", content=b"{nope", headers=JSON)).status_code == 400
    made = (await c.post("/grants", json={"agent": "bot", "tools": "*", "duration": "1h"})).json()
    assert made["remaining"] in ("59m59s", "1h0m0s")
    assert (await c.delete(f"/grants/{made['id'][:3]}")).status_code == 404
    r = await c.delete(f"/grants/{made['id'][:4]}")
    assert (r.status_code, r.json()) == (200, {"status": "revoked", "id": made["id"]})
    assert (await c.delete(f"/grants/{made['id']}")).json() == {"error": "grant not found"}


async def test_settings_put_changes_what_get_reports_and_rejects_bad_values(mesh: Mesh, client_of: Any) -> None:
    c = await client_of(mesh)
    before = (await c.get("/approvals/settings")).json()
    assert before["editable"] is True and before["settings"]["timeout_seconds"] == 300
    r = await c.put("/approvals/settings", json={"timeout_seconds": 60, "min_approvals": 3, "by": "ops"})
    assert r.json() == {"changed": ["timeout_seconds"]}
    after = (await c.get("/approvals/settings")).json()
    assert after["settings"]["timeout_seconds"] == 60 and after["defaults"]["timeout_seconds"] == 300
    assert (await c.put("/approvals/settings", json={"wait_seconds": -3})).status_code == 400
    assert (await c.put("/approvals/settings", json={"nope": 1})).status_code == 400


async def test_unknown_approval_is_404_with_the_contract_body(mesh: Mesh, client_of: Any) -> None:
    c = await client_of(mesh)
    r = await c.get("/approvals/abcdef")
    assert (r.status_code, r.json()) == (404, {"error": "approval not found"})
    assert (await c.post("/approvals/abcdef/approve")).status_code == 404


async def test_redaction_applies_to_views_when_content_is_not_exposed(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    mesh = mesh_of(supervisor={"expose_content": False})
    c = await client_of(mesh)
    a = mesh.approvals.submit(
        agent="bot",
        tool="fs.write",
        arguments={"path": "/a", "content": "x" * 10},
        trace_id="",
        policy_rule="p",
        policy_version="",
    )
    view = (await c.get(f"/approvals/{a.id}")).json()
    assert view["params"]["path"] == "/a" and view["params"]["content"]["content_length"] == 10
    assert "trace_id" not in view


async def test_the_open_loopback_control_plane_refuses_other_peers(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    remote = await client_of(mesh_of(auth={"open_loopback": True}), peer="203.0.113.9", Authorization="")
    for method, path in [("GET", "/approvals"), ("POST", "/grants"), ("POST", "/halts"), ("GET", "/halts")]:
        r = await remote.request(method, path)
        assert (r.status_code, r.json()) == (401, {"error": "control plane requires admin authorization"})


async def test_with_an_admin_token_only_the_token_opens_the_control_plane(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    mesh = mesh_of(auth={"admin_token": "s3cret"})
    c = await client_of(mesh, Authorization="")
    assert (await c.get("/halts")).status_code == 401  # loopback is not enough once a token is set
    assert (await c.get("/halts", headers={"Authorization": "Bearer s3cret"})).status_code == 200


async def test_a_per_tool_limit_answers_429_on_rest_and_decide_and_spares_other_tools(
    mesh_of: Callable[..., Mesh], client_of: Any
) -> None:
    policy = {
        "name": "lim",
        "agent": "*",
        "rate_limit": {"max_per_minute": 100},
        "tool_limits": [{"tools": ["echo.*"], "max_per_minute": 2}],
        "rules": [{"tools": ["*"], "action": "allow"}],
    }
    tools = [{"name": "echo", "bin": "/bin/echo", "bare": {}}, {"name": "say", "bin": "/bin/echo", "bare": {}}]
    c = await client_of(mesh_of(cli_tools=tools, policies=[policy]))
    codes = [(await c.post("/tool/echo.run", json={"args": [str(i)]}, headers=AGENT)).status_code for i in range(3)]
    assert codes == [200, 200, 429]
    limited = await c.post("/tool/echo.run", json={"args": ["z"]}, headers=AGENT)
    assert limited.json()["policy"] == "rate_limited"
    assert limited.json()["error"] == 'rate_limit: agent "bot" exceeded 2 calls/min on tool "echo.run"'
    trace = (await c.get("/traces", params={"trace": limited.json()["trace_id"]})).json()[0]
    assert trace["policy"] == "rate_limited"
    assert (await c.post("/tool/say.run", json={"args": ["other"]}, headers=AGENT)).status_code == 200
    decided = await c.post("/decide", json={"tool": "echo.run", "arguments": {"args": ["d"]}}, headers=AGENT)
    assert (decided.status_code, decided.json()["action"]) == (429, "deny")
    assert decided.json()["reason"] == 'rate_limit: agent "bot" exceeded 2 calls/min on tool "echo.run"'
    other = await c.post("/tool/echo.run", json={"args": ["x"]}, headers={"Authorization": "Bearer agent:else"})
    assert other.status_code == 200  # the count is the agent's on that tool
