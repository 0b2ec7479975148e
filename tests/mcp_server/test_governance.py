"""MCP tools/call is governed exactly as REST (DESIGN decision 4): grants, rate limits, loop detection, stops,
approvals in both modes, hidden tools, and the virtual tools."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.mcp_server.conftest import approval_id_in, write_config
from tests.mcp_server.inproc import ADMIN, ADMIN_TOKEN, Rpc, issue_token, mesh_client
from tests.support.waiting import eventually

AUTH = f"auth: {{admin_token: {ADMIN_TOKEN}}}\n"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, mcp=False, extra=AUTH)


async def test_a_grant_lifts_human_approval_on_mcp(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        assert (await rpc.text("secret.run", {"args": ["x"]})).startswith("Approval required (id: ")
        grant = await client.post(
            "/grants", json={"agent": "claude", "tools": "secret.*", "duration": "10m"}, headers=ADMIN
        )
        assert grant.status_code == 201
        ran = json.loads(await rpc.text("secret.run", {"args": ["granted"]}))
        assert ran["stdout"] == "granted\n"
        traces = (await client.get("/traces", params={"tool": "secret.run"}, headers=ADMIN)).json()
        assert traces[0]["policy_rule"] == f"grant:{grant.json()['id']}"


async def test_rate_limits_and_loop_detection_apply_on_mcp(tmp_path: Path) -> None:
    extra = (
        "  - name: limited\n    agent: limited\n    rate_limit: {max_per_minute: 3}\n"
        "    rules: [{tools: ['say.run'], action: allow}]\n"
    ) + AUTH
    config = write_config(tmp_path, mcp=False, extra=extra)
    async with mesh_client(config) as client:
        rpc = await Rpc(client, "limited").open()
        for word in ("a", "b"):
            assert "exit_code" in await rpc.text("say.run", {"args": [word]})
        third = await rpc.call("say.run", {"args": ["c"]})
        assert "exit_code" in third["content"][0]["text"]
        fourth = await rpc.call("say.run", {"args": ["d"]})
    assert fourth["isError"] is True
    assert fourth["content"][0]["text"] == 'Rate limited: rate_limit: agent "limited" exceeded 3 calls/min'

    config2 = write_config(tmp_path, mcp=False, extra=extra.replace("max_per_minute: 3", "max_per_minute: 100"))
    async with mesh_client(config2) as client:
        rpc = await Rpc(client, "limited").open()
        texts = [await rpc.text("say.run", {"args": ["same"]}) for _ in range(4)]
    assert texts[-1].startswith('Rate limited: loop_detected: agent "limited" called say.run with same params')


async def test_per_tool_limits_apply_on_mcp_and_spare_the_agents_other_tools(tmp_path: Path) -> None:
    extra = (
        "  - name: limited\n    agent: limited\n    tool_limits: [{tools: ['say.*'], max_total: 2}]\n"
        "    rules: [{tools: ['say.run', 'secret.run'], action: allow}]\n"
    ) + AUTH
    async with mesh_client(write_config(tmp_path, mcp=False, extra=extra)) as client:
        rpc = await Rpc(client, "limited").open()
        for word in ("a", "b"):
            assert "exit_code" in await rpc.text("say.run", {"args": [word]})
        third = await rpc.call("say.run", {"args": ["c"]})
        other = await rpc.call("secret.run", {"args": ["d"]})
    assert third["isError"] is True
    assert third["content"][0]["text"] == (
        'Rate limited: rate_limit: agent "limited" exceeded total budget (2 calls) on tool "say.run"'
    )
    assert not other.get("isError") and "exit_code" in other["content"][0]["text"]


async def test_an_emergency_stop_blocks_mcp_calls_with_its_message(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        halt = await client.post(
            "/halts", json={"scope": "agent", "target": "claude", "reason": "incident", "by": "ops"}, headers=ADMIN
        )
        assert halt.status_code == 201
        stopped = await rpc.call("say.run", {"args": ["x"]})
        virtual = await rpc.call("grant.list")
    assert stopped["isError"] is True and "incident" in stopped["content"][0]["text"]
    assert virtual["isError"] is True


async def test_hide_denied_tools_drops_what_the_agent_can_only_be_denied(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False, extra=AUTH + "hide_denied_tools: true\n")
    async with mesh_client(config) as client:
        names = {t["name"] for t in (await (await Rpc(client).open()).post("tools/list")).json()["result"]["tools"]}
        stranger = await Rpc(client, "stranger").open()
        stranger_names = {t["name"] for t in (await stranger.post("tools/list")).json()["result"]["tools"]}
    assert {"say.run", "secret.run", "grant.list", "mesh.catalog"} <= names and "rm.run" not in names
    assert stranger_names == {"grant.list", "mesh.catalog"}  # the default deny hides every upstream tool


async def test_supervisor_mode_blocks_the_call_until_a_supervisor_approves(tmp_path: Path) -> None:
    supervisor = "{enabled: true, auto_approve: false, supervisor_agents: [boss]}"
    config = write_config(tmp_path, mcp=False, extra=AUTH, supervisor=supervisor)
    token = issue_token(config, "boss")
    async with mesh_client(config) as client:
        agent = await Rpc(client).open()
        boss = await Rpc(client, token=token).open()
        blocked = asyncio.create_task(agent.text("secret.run", {"args": ["after approval"]}))

        async def listed() -> list[dict[str, object]]:
            return list((await client.get("/approvals", headers=ADMIN)).json())

        pending: list[dict[str, object]] = await eventually(listed, 5, "the approval to be pending")
        assert len(pending) == 1 and not blocked.done()
        answer = await boss.text("approval.resolve", {"id": str(pending[0]["id"])[:8], "decision": "approve"})
        assert answer.endswith("the waiting caller runs it.")
        result = json.loads(await asyncio.wait_for(blocked, 10))
    assert result["stdout"] == "after approval\n"


async def test_approval_resolve_replays_a_non_blocking_request_once(config: Path) -> None:
    token = issue_token(config, "boss")
    async with mesh_client(config) as client:
        agent = await Rpc(client).open()
        boss = await Rpc(client, modern=True, token=token).open()
        approval = approval_id_in(await agent.text("secret.run", {"args": ["replayed"]}))
        replay = json.loads(await boss.text("approval.resolve", {"id": approval, "decision": "approve"}))
        assert replay["stdout"] == "replayed\n"
        again = await agent.text("secret.run", {"args": ["replayed"]})
    assert approval_id_in(again) != approval  # the replay used the approval up


async def test_grant_create_is_capped_at_24h_and_grant_revoke_ends_it(config: Path) -> None:
    token = issue_token(config, "boss")
    async with mesh_client(config) as client:
        boss = await Rpc(client, token=token).open()
        created = json.loads(
            await boss.text("grant.create", {"agent": "claude", "tools": "secret.*", "duration": "48h"})
        )
        assert created["granted_by"] == "supervisor:boss" and created["agent"] == "claude"
        assert created["remaining"] in ("24h0m0s", "23h59m59s")
        agent = await Rpc(client).open()
        listed = json.loads(await agent.text("grant.list"))
        assert [g["id"] for g in listed] == [created["id"]]
        stranger = json.loads(await (await Rpc(client, "stranger").open()).text("grant.list"))
        assert stranger == []  # grants for other agents are not shown to a non-supervisor
        assert await boss.text("grant.revoke", {"id": created["id"]}) == f"Grant {created['id']} revoked."
        assert (await agent.text("secret.run", {"args": ["x"]})).startswith("Approval required")
        bad = await boss.call("grant.create", {"tools": "x", "duration": "soon"})
    assert bad["isError"] is True and bad["content"][0]["text"].startswith("invalid duration:")


async def test_mesh_catalog_groups_tools_with_the_callers_action(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        catalog = json.loads(await rpc.text("mesh.catalog"))
        only_cli = json.loads(await rpc.text("mesh.catalog", {"source": "cli"}))
    actions = {t["name"]: t["action"] for g in catalog["groups"].values() for t in g["tools"]}
    assert actions["say.run"] == "allow" and actions["rm.run"] == "deny" and actions["secret.run"] == "human_approval"
    assert catalog["groups"]["say"] == {
        "source": "cli",
        "runtime": "/bin/echo",
        "count": 1,
        "tools": [
            {"name": "say.run", "description": catalog["groups"]["say"]["tools"][0]["description"], "action": "allow"}
        ],
    }
    assert catalog["groups"]["mesh"]["source"] == "virtual"
    assert catalog["summary"] == f"{len(actions)} tools across {len(catalog['groups'])} sources"
    assert set(only_cli["groups"]) == {"say", "secret", "rm", "ppid"}


async def test_a_supervisor_agent_cannot_resolve_its_own_approval_or_grant_itself(tmp_path: Path) -> None:
    """issue 13: `approval.resolve` and `grant.create` are a supervisor's, but never over its own calls."""
    supervisor = '{auto_approve: false, supervisor_agents: ["claude", "boss"]}'  # claude's secret.run waits
    config = write_config(tmp_path, mcp=False, extra=AUTH, supervisor=supervisor)
    tokens = {agent: issue_token(config, agent) for agent in ("claude", "boss")}
    async with mesh_client(config) as client:
        claude = await Rpc(client, token=tokens["claude"]).open()
        approval = approval_id_in(await claude.text("secret.run", {"args": ["mine"]}))
        for decision in ("approve", "deny"):
            own = await claude.call("approval.resolve", {"id": approval, "decision": decision})
            assert own["isError"] is True
            assert own["content"][0]["text"] == "agent 'claude' cannot resolve its own approval"
        for args in ({"agent": "claude", "tools": "secret.*"}, {"agent": "*", "tools": "*"}, {"approval_id": approval}):
            granted = await claude.call("grant.create", {"tools": "secret.*", "duration": "1h", **args})
            assert granted["isError"] is True and "cannot grant itself" in granted["content"][0]["text"], args
        assert (await client.get("/grants", headers=ADMIN)).json() == []
        detail = (await client.get(f"/approvals/{approval}", headers=ADMIN)).json()
        assert detail["status"] == "pending"
        boss = await Rpc(client, token=tokens["boss"]).open()
        replay = json.loads(await boss.text("approval.resolve", {"id": approval, "decision": "approve"}))
        assert replay["stdout"] == "mine\n"
