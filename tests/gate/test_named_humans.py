"""Named humans decide (docs/security.md "Users and roles"): users with roles and scopes, four eyes, attribution
from the credential, the reviewer's reason back to the agent, and a truthful record. In process, over the pets
backend, with memory on so decision facts are written."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from flux7.shared.decisions.memory_client import InProcessMemory, parse_memory_list
from flux7.shared.errors import Forbidden
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.mesh import mesh_client, pets_mesh_config
from tests.support.waiting import eventually
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}
POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["delete_pet"]
    action: human_approval
    approvals: 2
  - tools: ["create_pet"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def world(tmp_path: Path, backend: Backend) -> AsyncIterator[tuple[Mesh, httpx.AsyncClient, dict[str, str]]]:
    """A mesh, its client, and the personal tokens of alice (approver, pets), bob (viewer), carol (approver,
    files), dave and erin (approvers, any tool)."""
    config = pets_mesh_config(
        tmp_path,
        backend,
        POLICY,
        approval_timeout=30,
        memory="{hybrid: false}",
        extra="supervisor: {supervisor_agents: [sup7]}",
    )
    mesh = Mesh(load_settings(config, env={}))
    async with mesh_client(mesh) as client:
        tokens: dict[str, str] = {}
        for name, role, tools in [
            ("alice", "approver", ["create_pet", "delete_pet"]),
            ("bob", "viewer", []),
            ("carol", "approver", ["files.*"]),
            ("dave", "approver", []),
            ("erin", "approver", []),
        ]:
            r = await client.post("/users", json={"name": name, "role": role, "approve_tools": tools}, headers=ADMIN)
            assert r.status_code == 201, r.text
            tokens[name] = r.json()["token"]
        yield mesh, client, tokens


async def pending(client: httpx.AsyncClient, tool: str, as_: dict[str, str] = ADMIN) -> dict[str, object]:
    async def found() -> list[dict[str, object]]:
        return [a for a in (await client.get("/approvals", headers=as_)).json() if a["tool"] == tool]

    [approval] = await eventually(found, 10, f"a pending {tool}")
    return approval


async def test_an_approver_decides_by_name_and_the_record_says_so_everywhere(
    world: tuple[Mesh, httpx.AsyncClient, dict[str, str]],
) -> None:
    mesh, client, tokens = world
    call = asyncio.create_task(client.post("/tool/create_pet", json={"name": "Kit"}, headers=AGENT))
    approval = await pending(client, "create_pet", bearer(tokens["alice"]))
    assert approval["actionable"] is True and approval["params"] == {"name": "Kit"}
    r = await client.post(
        f"/approvals/{approval['id']}/approve", json={"resolved_by": "mallory"}, headers=bearer(tokens["alice"])
    )
    assert r.status_code == 200, r.text
    done = await asyncio.wait_for(call, 10)
    assert done.status_code == 200
    detail = (await client.get(f"/approvals/{approval['id']}", headers=ADMIN)).json()
    assert (detail["resolved_by"], detail["resolved_note"], detail["resolver_kind"]) == (
        "user:alice",
        "mallory",
        "human",
    )
    [trace] = (await client.get("/traces", params={"trace": done.json()["trace_id"]}, headers=ADMIN)).json()
    assert trace["approved_by"] == "user:alice"
    assert await mesh.decisions.drain(10)
    facts = parse_memory_list(await InProcessMemory(mesh.memory).call_tool("memory_list", {"tags": ["decision"]}))
    recalled = await InProcessMemory(mesh.memory).call_tool("memory_recall", {"key": facts[0].key})
    assert "approved by user:alice" in recalled
    me = (await client.get("/me", headers=bearer(tokens["alice"]))).json()
    assert (me["actor"], me["role"], me["approve_tools"]) == ("user:alice", "approver", ["create_pet", "delete_pet"])


async def test_a_viewer_reads_but_may_not_decide_and_an_approver_only_within_scope(
    world: tuple[Mesh, httpx.AsyncClient, dict[str, str]],
) -> None:
    _, client, tokens = world
    call = asyncio.create_task(client.post("/tool/create_pet", json={"name": "Rex"}, headers=AGENT))
    approval = await pending(client, "create_pet")
    as_bob, as_carol = bearer(tokens["bob"]), bearer(tokens["carol"])
    seen = [a for a in (await client.get("/approvals", headers=as_bob)).json() if a["id"] == approval["id"]]
    assert seen and seen[0]["actionable"] is False
    assert (await client.post(f"/approvals/{approval['id']}/approve", headers=as_bob)).status_code == 403
    carols = [a for a in (await client.get("/approvals", headers=as_carol)).json() if a["id"] == approval["id"]]
    assert carols[0]["actionable"] is False  # not hers to decide
    refused = await client.post(f"/approvals/{approval['id']}/approve", headers=as_carol)
    assert refused.status_code == 403 and "outside their scope" in refused.json()["error"]
    # nor may they change the control plane, or grant what is not theirs
    assert (await client.post("/halts", json={"scope": "all"}, headers=as_bob)).status_code == 403
    grant = {"agent": "claude", "tools": "create_pet", "duration": "5m"}
    assert (await client.post("/grants", json=grant, headers=as_carol)).status_code == 403
    assert (await client.post("/grants", json=grant, headers=bearer(tokens["alice"]))).status_code == 201
    assert (await client.get(f"/approvals/{approval['id']}", headers=ADMIN)).json()["status"] == "pending"
    await client.post(f"/approvals/{approval['id']}/deny", headers=ADMIN)
    await asyncio.wait_for(call, 10)


async def test_four_eyes_need_two_distinct_people_and_one_deny_ends_it(
    world: tuple[Mesh, httpx.AsyncClient, dict[str, str]],
) -> None:
    _, client, tokens = world
    as_alice, as_dave = bearer(tokens["alice"]), bearer(tokens["dave"])
    call = asyncio.create_task(client.post("/tool/delete_pet", json={"petId": "1"}, headers=AGENT))
    approval = await pending(client, "delete_pet")
    assert approval["required_approvals"] == 2 and approval["approvals"] == []
    first = (await client.post(f"/approvals/{approval['id']}/approve", headers=as_alice)).json()
    assert (first["status"], first["approvals"], first["required_approvals"]) == ("pending", 1, 2)
    again = (await client.post(f"/approvals/{approval['id']}/approve", headers=as_alice)).json()
    assert (again["status"], again["approvals"]) == ("pending", 1)  # the same person counts once
    listed = [a for a in (await client.get("/approvals", headers=as_alice)).json() if a["id"] == approval["id"]]
    assert [v["actor"] for v in listed[0]["approvals"]] == ["user:alice"] and listed[0]["actionable"] is False
    assert not call.done()
    second = (await client.post(f"/approvals/{approval['id']}/approve", headers=as_dave)).json()
    assert second["status"] == "approved"
    assert (await asyncio.wait_for(call, 10)).status_code == 200

    denied_call = asyncio.create_task(client.post("/tool/delete_pet", json={"petId": "2"}, headers=AGENT))
    other = await pending(client, "delete_pet")
    await client.post(f"/approvals/{other['id']}/approve", headers=as_alice)
    reason = "two pets were deleted by mistake this week"
    r = await client.post(f"/approvals/{other['id']}/deny", json={"reasoning": reason}, headers=bearer(tokens["erin"]))
    assert r.json()["status"] == "denied"
    answer = await asyncio.wait_for(denied_call, 10)
    # the reviewer's words reach the agent verbatim
    assert (answer.status_code, answer.json()["error"]) == (403, f"approval denied by user:erin: {reason}")


async def test_a_supervisor_cannot_stand_in_for_one_of_the_four_eyes(
    world: tuple[Mesh, httpx.AsyncClient, dict[str, str]],
) -> None:
    mesh, client, _ = world
    sup7 = bearer(mesh.tokens.issue("sup7").token)
    call = asyncio.create_task(client.post("/tool/delete_pet", json={"petId": "3"}, headers=AGENT))
    approval = await pending(client, "delete_pet")
    refused = await client.post(f"/approvals/{approval['id']}/approve", headers=sup7)
    assert refused.status_code == 403 and "needs 2 people" in refused.json()["error"]
    await client.post(f"/approvals/{approval['id']}/deny", headers=sup7)  # a machine may still say no
    assert (await asyncio.wait_for(call, 10)).status_code == 403


async def test_a_user_never_decides_a_call_made_on_their_own_behalf(tmp_path: Path, backend: Backend) -> None:
    config = pets_mesh_config(tmp_path, backend, POLICY)
    mesh = Mesh(load_settings(config, env={}))
    try:
        queued = mesh.approvals.submit(
            agent="claude",
            tool="create_pet",
            arguments={"name": "Kit"},
            trace_id="t" * 32,
            policy_rule="agents",
            policy_version="",
            requester_user="alice",
        )
        with pytest.raises(Forbidden, match="on their own behalf"):
            mesh.approvals.resolve(queued.id, "approve", resolved_by="user:alice", resolver="", user="alice")
        done = mesh.approvals.resolve(queued.id, "approve", resolved_by="user:dave", resolver="", user="dave")
        assert done.status == "approved"
    finally:
        mesh.db.close()


async def test_users_are_managed_by_owners_and_a_disabled_user_is_refused_at_once(
    world: tuple[Mesh, httpx.AsyncClient, dict[str, str]],
) -> None:
    _, client, tokens = world
    as_dave = bearer(tokens["dave"])
    assert (await client.post("/users", json={"name": "eve", "role": "owner"}, headers=as_dave)).status_code == 403
    assert (await client.get("/users", headers=as_dave)).status_code == 403
    names = [u["name"] for u in (await client.get("/users", headers=ADMIN)).json()]
    assert names == ["alice", "bob", "carol", "dave", "erin"]
    rotated = (await client.post("/users/dave/rotate", headers=ADMIN)).json()
    assert (await client.get("/me", headers=as_dave)).status_code == 401  # the old token stopped
    assert (await client.get("/me", headers=bearer(rotated["token"]))).status_code == 200
    assert (await client.post("/users/dave/disable", headers=ADMIN)).json()["disabled"] is True
    assert (await client.get("/me", headers=bearer(rotated["token"]))).status_code == 401
    # a personal token names a person, never an agent
    refused = await client.post("/tool/list_pets", json={}, headers=bearer(tokens["alice"]))
    assert refused.status_code == 401
    events = [t for t in (await client.get("/traces", headers=ADMIN)).json() if t["tool"].startswith("mesh.user")]
    assert {(e["tool"], e["user_id"], e["agent_id"]) for e in events} >= {
        ("mesh.user_disable", "owner:admin-token", "")
    }


@pytest.mark.served
async def test_the_user_cli_adds_a_user_whose_token_works_against_the_server(tmp_path: Path, backend: Backend) -> None:
    config = pets_mesh_config(tmp_path, backend, POLICY)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "flux7.shared.cli.users",
        "add",
        "frank",
        "--role",
        "viewer",
        "--config",
        str(config),
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    added = json.loads(out)
    assert added["role"] == "viewer" and added["token"].startswith("f7u_")
    mesh = Mesh(load_settings(config, env={}))
    async with mesh_client(mesh) as client:
        me = (await client.get("/me", headers=bearer(added["token"]))).json()
        assert me["actor"] == "user:frank"
