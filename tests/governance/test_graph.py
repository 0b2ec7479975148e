"""The dependency graph (declared and inferred edges) and impact analysis with counts over the last 30 days."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.governance.support import ADMIN, agent, governed_mesh
from tests.support.mesh import mesh_client
from tests.upstreams.servers.http_backend import Backend

CATALOG = """
agents:
  - id: claude
    owner: alice
    tools: [list_pets, get_pet_by_id]
    upstreams: [spec.json]
    sub_agents: [helper]
    lifecycle: active
  - id: helper
    owner: alice
    tools: [get_boom]
    lifecycle: active
"""
UPSTREAM = "spec.json"  # the OpenAPI source's name: its file


async def call_in(client: httpx.AsyncClient, who: str, tool: str, session: str, params: Any = None) -> int:
    headers = {**agent(who), "X-Session-Id": session}
    r = await client.post(f"/tool/{tool}", json={"params": params or {}}, headers=headers)
    return r.status_code


async def traffic(client: httpx.AsyncClient) -> None:
    assert await call_in(client, "claude", "list_pets", "s1") == 200
    assert await call_in(client, "claude", "list_pets", "s2") == 200
    assert await call_in(client, "claude", "get_pet_by_id", "s2", {"petId": "1"}) == 200
    assert await call_in(client, "helper", "get_boom", "s3") == 502
    assert await call_in(client, "helper", "get_boom", "s3") == 502
    assert await call_in(client, "helper", "list_pets", "s3") == 200
    assert await call_in(client, "stranger", "get_text", "s4") == 200


async def test_the_graph_has_declared_and_inferred_edges(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend, catalog=CATALOG)) as client:
        await traffic(client)
        graph = (await client.get("/governance/graph", headers=ADMIN)).json()
        nodes = {n["id"]: n for n in graph["nodes"]}
        assert nodes["agent:stranger"]["discovered"] is True
        assert nodes["agent:claude"]["declared"] is True and nodes["agent:claude"]["state"] == "active"
        assert nodes[f"upstream:{UPSTREAM}"]["type"] == "upstream"
        edges = {(e["source"], e["target"], e["kind"]): e for e in graph["edges"]}
        assert ("agent:claude", "tool:list_pets", "declared") in edges
        assert ("agent:claude", f"upstream:{UPSTREAM}", "declared") in edges
        assert edges[("agent:claude", "agent:helper", "declared")]["relation"] == "sub_agent"
        assert ("tool:list_pets", f"upstream:{UPSTREAM}", "served_by") in edges
        listed = edges[("agent:claude", "tool:list_pets", "inferred")]
        assert (listed["calls"], listed["errors"], listed["error_rate"]) == (2, 0, 0.0)
        assert listed["last_seen"].endswith("Z")
        boom = edges[("agent:helper", "tool:get_boom", "inferred")]
        assert (boom["calls"], boom["errors"], boom["error_rate"]) == (2, 2, 1.0)
        # inferred only: helper was never declared to use list_pets
        assert ("agent:helper", "tool:list_pets", "inferred") in edges
        assert ("agent:helper", "tool:list_pets", "declared") not in edges
        assert (await client.get("/governance/graph", params={"days": 0}, headers=ADMIN)).status_code == 400


async def test_impact_of_removing_an_upstream_changing_a_tool_and_suspending_an_agent(
    tmp_path: Path, backend: Backend
) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend, catalog=CATALOG)) as client:
        await traffic(client)

        async def impact(kind: str, name: str) -> dict[str, Any]:
            r = await client.get("/governance/impact", params={"kind": kind, "name": name}, headers=ADMIN)
            assert r.status_code == 200, r.text
            return dict(r.json())

        upstream = await impact("upstream", UPSTREAM)
        assert (upstream["calls"], upstream["sessions"], upstream["days"]) == (7, 4, 30)
        agents = {a["agent"]: a for a in upstream["agents"]}
        assert (agents["claude"]["calls"], agents["claude"]["sessions"]) == (3, 2)
        assert (agents["helper"]["calls"], agents["helper"]["sessions"]) == (3, 1)
        assert (agents["stranger"]["calls"], agents["stranger"]["sessions"]) == (1, 1)
        tools = {t["tool"]: t["calls"] for t in upstream["tools"]}
        assert tools["list_pets"] == 3 and tools["get_boom"] == 2 and tools["delete_pet"] == 0
        assert upstream["declared_by"] == ["claude", "helper"]

        tool = await impact("tool", "list_pets")
        assert (tool["calls"], tool["sessions"]) == (3, 3)
        assert [(a["agent"], a["calls"], a["sessions"]) for a in tool["agents"]] == [("claude", 2, 2), ("helper", 1, 1)]
        assert tool["declared_by"] == ["claude"]

        helper = await impact("agent", "helper")
        assert (helper["calls"], helper["sessions"]) == (3, 1)
        assert {t["tool"]: t["calls"] for t in helper["tools"]} == {"get_boom": 2, "list_pets": 1}
        assert helper["dependants"] == ["claude"]  # claude declares helper as a sub-agent

        for params, status in (
            ({"kind": "server", "name": "x"}, 400),
            ({"kind": "tool", "name": "nothing"}, 404),
            ({"kind": "upstream", "name": "nowhere"}, 404),
            ({"kind": "agent", "name": "ghost"}, 404),
            ({"kind": "tool"}, 400),
            ({"kind": "tool", "name": "list_pets", "days": 0}, 400),
        ):
            r = await client.get("/governance/impact", params=params, headers=ADMIN)
            assert r.status_code == status, (params, r.text)
