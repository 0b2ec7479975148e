"""Policy replay: a proposed set re-decides past traced calls; what it reports equals what the pipeline decides
live once the set is applied. Drafts, apply, determinism, and clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.governance.support import ADMIN, agent, governed_mesh
from tests.support.mesh import mesh_client
from tests.upstreams.servers.http_backend import Backend

# today: deletes denied, creates behind a human, the rest allowed
PROPOSED = """
name: agents
agent: "*"
rules:
  - tools: ["delete_pet"]
    action: human_approval
  - tools: ["create_pet"]
    action: allow
    condition: {field: name, operator: starts_with, value: K}
  - tools: ["create_pet"]
    action: deny
  - tools: ["get_boom"]
    action: deny
  - tools: ["*"]
    action: allow
"""
BATCH = """
name: batch
agent: "batch-*"
rules:
  - tools: ["list_pets"]
    action: deny
"""

CALLS: list[tuple[str, str, dict[str, Any]]] = [
    (who, tool, args)
    for who in ("claude", "batch-1", "stranger")
    for tool, args in (
        ("list_pets", {}),
        ("get_pet_by_id", {"petId": "1"}),
        ("create_pet", {"name": "Kit"}),
        ("create_pet", {"name": "Rex"}),
        ("delete_pet", {"petId": "1"}),
        ("get_boom", {}),
    )
]


async def decide_all(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    """Every call decided live through /decide: (trace id, action)."""
    out = []
    for who, tool, args in CALLS:
        r = await client.post("/decide", json={"tool": tool, "arguments": args}, headers=agent(who))
        assert r.status_code in (200, 403), r.text
        out.append((r.json()["trace_id"], r.json()["action"]))
    return out


async def test_replay_equals_the_live_decisions_of_the_applied_set(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        before = await decide_all(client)
        files = {"agents.yaml": PROPOSED, "batch.yaml": BATCH}
        r = await client.post("/governance/replay", json={"files": files, "days": 1}, headers=ADMIN)
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["calls"] == len(CALLS)
        changes = {c["trace_id"]: c for c in report["changes"]}
        assert report["changed"] == len(changes) > 0
        # the replay's `from` is what was decided live
        for trace_id, action in before:
            if trace_id in changes:
                assert changes[trace_id]["from"] == action

        # apply the same set, decide the same calls live again: the replay said so
        for name, text in files.items():
            put = await client.put(f"/policy-files/{name[:-5]}", json={"text": text}, headers=ADMIN)
            assert put.status_code == 200, put.text
        after = await decide_all(client)
        for (old_id, old_action), (_, new_action) in zip(before, after, strict=True):
            expected = changes[old_id]["to"] if old_id in changes else old_action
            assert new_action == expected, (old_id, old_action, new_action)

        # grouped by agent and tool, narrowing first
        groups = {(g["agent"], g["tool"], g["from"], g["to"]): g["count"] for g in report["groups"]}
        assert groups[("batch-1", "list_pets", "allow", "deny")] == 1
        assert groups[("claude", "create_pet", "human_approval", "deny")] == 1  # Rex
        assert groups[("claude", "create_pet", "human_approval", "allow")] == 1  # Kit
        assert groups[("claude", "delete_pet", "deny", "human_approval")] == 1
        ranks = [
            0 if g["to"] == "deny" or (g["from"], g["to"]) == ("allow", "human_approval") else 1
            for g in report["groups"]
        ]
        assert ranks == sorted(ranks)
        assert report["transitions"]["allow->deny"] == 4  # get_boom for each of 3 agents, batch-1 list_pets
        assert sum(report["transitions"].values()) == report["changed"]


async def test_a_replay_is_deterministic_and_the_current_set_changes_nothing(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        await decide_all(client)
        body = {"files": {"agents.yaml": PROPOSED}, "days": 1}
        first = (await client.post("/governance/replay", json=body, headers=ADMIN)).json()
        second = (await client.post("/governance/replay", json=body, headers=ADMIN)).json()
        first.pop("elapsed_ms"), second.pop("elapsed_ms")
        assert first == second
        current = (tmp_path / "policies" / "agents.yaml").read_text()
        same = (await client.post("/governance/replay", json={"files": {"agents.yaml": current}}, headers=ADMIN)).json()
        assert (same["calls"], same["changed"], same["groups"]) == (len(CALLS), 0, [])


async def test_a_suspended_agents_calls_never_change_in_a_replay(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        await decide_all(client)
        moved = await client.post(
            "/governance/catalog/claude/lifecycle", json={"state": "suspended", "reason": "r", "by": "b"}, headers=ADMIN
        )
        assert moved.status_code == 200
        report = (
            await client.post("/governance/replay", json={"files": {"agents.yaml": PROPOSED}}, headers=ADMIN)
        ).json()
        assert "claude" not in {g["agent"] for g in report["groups"]}


async def test_a_draft_is_saved_replayed_applied_and_diffed(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        await decide_all(client)
        saved = await client.put(
            "/governance/drafts/open-creates", json={"files": {"agents": PROPOSED}, "by": "alice"}, headers=ADMIN
        )
        assert saved.status_code == 200, saved.text
        report = (await client.post("/governance/replay", json={"draft": "open-creates"}, headers=ADMIN)).json()
        assert report["draft"] == "open-creates" and report["changed"] > 0
        listed = (await client.get("/governance/drafts", headers=ADMIN)).json()
        assert [(d["name"], d["created_by"], d["applied_at"]) for d in listed] == [
            ("open-creates", "owner:admin-token", "")
        ]

        applied = await client.post("/governance/drafts/open-creates/apply", json={"by": "alice"}, headers=ADMIN)
        assert applied.status_code == 200, applied.text
        assert (tmp_path / "policies" / "agents.yaml").read_text() == PROPOSED
        live = await client.post(
            "/decide", json={"tool": "create_pet", "arguments": {"name": "Kit"}}, headers=agent("x")
        )
        assert live.json()["action"] == "allow"
        assert (await client.get("/governance/drafts/open-creates", headers=ADMIN)).json()["applied_at"]

        # the write kept a version; the diff classifies the change
        diff = (
            await client.get("/governance/diff", params={"kind": "policy", "name": "agents.yaml"}, headers=ADMIN)
        ).json()
        assert (diff["from"], diff["to"]) == (1, 2)
        kinds = {(c["kind"], c["subject"]) for c in diff["changes"]}
        assert ("permission_narrowed", "claude -> get_boom") in kinds  # claude called it: breaking
        assert ("approval_removed", "claude -> delete_pet") not in kinds  # deny -> human_approval is widening
        assert ("permission_widened", "claude -> delete_pet") in kinds
        assert diff["changes"][0]["class"] == "breaking"
        assert "+    action: human_approval" in diff["text_diff"] or "human_approval" in diff["text_diff"]


async def test_bad_replay_requests_are_refused(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        cases: list[tuple[dict[str, Any], str]] = [
            ({}, "exactly one"),
            ({"files": {"agents.yaml": PROPOSED}, "draft": "x"}, "exactly one"),
            ({"files": {"agents.yaml": "name: [x"}}, ""),
            ({"files": {"../evil.yaml": PROPOSED}}, "invalid policy file name"),
            ({"files": {"agents.yaml": PROPOSED}, "days": 0}, "days"),
            ({"files": {"other.yaml": PROPOSED}}, "duplicate policy name"),
        ]
        for body, words in cases:
            r = await client.post("/governance/replay", json=body, headers=ADMIN)
            assert r.status_code == 400, (body, r.text)
            assert words in r.json()["error"], (body, r.text)
        assert (await client.post("/governance/replay", json={"draft": "nope"}, headers=ADMIN)).status_code == 404
        assert (await client.post("/governance/replay", json={"files": {}})).status_code == 401
