"""Supervisor rights come from a proven credential, never from a claimed id.

An agent whose call waits for a human used to claim the supervisor's id (`Bearer agent:sup7`) on a loopback
bind and approve its own call over `/mcp`, or grant itself everything for a day. The claim now identifies an
ordinary agent; the supervisor's own token (`flux7 token issue sup7`) is what the MCP `approval.*` and `grant.*`
tools and the REST approval queue accept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mcp_server.conftest import approval_id_in, write_config
from tests.mcp_server.inproc import ADMIN, ADMIN_TOKEN, Rpc, error_of, issue_token, mesh_client

SUPERVISOR = '{auto_approve: false, supervisor_agents: ["sup7"]}'
AUTH = f"auth: {{admin_token: {ADMIN_TOKEN}}}\n"
PRIVILEGED = ("approval.pending", "approval.resolve", "grant.create", "grant.revoke")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, mcp=False, extra=AUTH, supervisor=SUPERVISOR)


async def test_a_claimed_supervisor_id_over_mcp_gets_no_supervisor_tool_and_its_own_call_stays_pending(
    config: Path,
) -> None:
    async with mesh_client(config) as client:
        claude = await Rpc(client).open()
        approval = approval_id_in(await claude.text("secret.run", {"args": ["self-approved"]}))
        impostor = await Rpc(client, "sup7").open()  # the waiting agent, claiming the supervisor's id
        listed = (await impostor.post("tools/list")).json()["result"]["tools"]
        assert not {t["name"] for t in listed} & set(PRIVILEGED)
        attempts = {
            "approval.pending": {},
            "approval.resolve": {"id": approval, "decision": "approve"},
            "grant.create": {"agent": "claude", "tools": "*", "duration": "24h"},
            "grant.revoke": {"id": "0000"},
        }
        for name, arguments in attempts.items():
            code, message = error_of(await impostor.post("tools/call", {"name": name, "arguments": arguments}))
            assert code == -32601 and "operator-only" in message, name
        detail = (await client.get(f"/approvals/{approval}", headers=ADMIN)).json()
        assert detail["status"] == "pending"
        assert (await client.get("/grants", headers=ADMIN)).json() == []
        # the REST approval queue does not believe the claim either
        claimed = {"Authorization": "Bearer agent:sup7"}
        assert (await client.get("/approvals", headers=claimed)).status_code == 401
        assert (await client.post(f"/approvals/{approval}/approve", headers=claimed)).status_code == 401


async def test_the_supervisors_own_token_lists_resolves_and_grants_and_is_recorded_by_name(config: Path) -> None:
    token = issue_token(config, "sup7")
    async with mesh_client(config) as client:
        claude = await Rpc(client).open()
        approval = approval_id_in(await claude.text("secret.run", {"args": ["approved by sup7"]}))
        sup7 = await Rpc(client, token=token).open()
        listed = (await sup7.post("tools/list")).json()["result"]["tools"]
        assert set(PRIVILEGED) <= {t["name"] for t in listed}
        assert approval[:8] in await sup7.text("approval.pending")
        replay = json.loads(await sup7.text("approval.resolve", {"id": approval, "decision": "approve"}))
        assert replay["stdout"] == "approved by sup7\n"
        detail = (await client.get(f"/approvals/{approval}", headers=ADMIN)).json()
        assert detail["resolved_by"] == "supervisor:sup7"
        granted = json.loads(await sup7.text("grant.create", {"agent": "claude", "tools": "say.*", "duration": "1h"}))
        assert granted["granted_by"] == "supervisor:sup7"


async def test_over_rest_a_supervisor_token_works_the_queue_and_the_body_cannot_rename_the_resolver(
    config: Path,
) -> None:
    token = issue_token(config, "sup7")
    sup7 = {"Authorization": f"Bearer {token}"}
    async with mesh_client(config) as client:
        claude = await Rpc(client).open()
        first = approval_id_in(await claude.text("secret.run", {"args": ["one"]}))
        second = approval_id_in(await claude.text("secret.run", {"args": ["two"]}))
        pending = (await client.get("/approvals", headers=sup7)).json()
        assert {a["id"] for a in pending} == {first, second}
        forged = {"resolved_by": "alice", "reasoning": "looks fine"}
        r = await client.post(f"/approvals/{first}/approve", json=forged, headers=sup7)
        assert r.status_code == 200, r.text
        detail = (await client.get(f"/approvals/{first}", headers=sup7)).json()
        assert (detail["resolved_by"], detail["resolved_note"]) == ("supervisor:sup7", "alice")
        r = await client.post(f"/approvals/{second}/deny", json={"resolved_by": "bob"}, headers=ADMIN)
        detail = (await client.get(f"/approvals/{second}", headers=ADMIN)).json()
        assert (detail["resolved_by"], detail["resolved_note"]) == ("owner:admin-token", "bob")
        decided = {d["id"]: d for d in (await client.get("/approvals/decisions", headers=ADMIN)).json()["decisions"]}
        assert decided[first]["resolver_kind"] == "supervisor"  # "alice" in the body never makes it a human's
        # the rest of the control plane stays the operators': a proven supervisor, but not theirs (403)
        assert (await client.get("/approvals/decisions", headers=sup7)).status_code == 403
        assert (await client.post("/halts", json={"scope": "all"}, headers=sup7)).status_code == 403


async def test_a_token_of_an_agent_not_listed_as_supervisor_gets_no_rights(config: Path) -> None:
    token = issue_token(config, "claude")
    async with mesh_client(config) as client:
        claude = await Rpc(client, token=token).open()
        code, _ = error_of(await claude.post("tools/call", {"name": "approval.pending", "arguments": {}}))
        assert code == -32601
        assert (await client.get("/approvals", headers={"Authorization": f"Bearer {token}"})).status_code == 401
