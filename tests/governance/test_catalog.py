"""The agent catalog: declared and discovered agents, control-plane editing and hot reload, and the lifecycle
floor (a suspended or retired agent refused before any policy) on REST, /decide and MCP."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.governance.support import ADMIN, CATALOG, agent, call, governed_mesh
from tests.mcp_server.inproc import Rpc
from tests.support.mesh import mesh_client
from tests.support.waiting import eventually
from tests.upstreams.servers.http_backend import Backend


async def _transition(client: httpx.AsyncClient, entry: str, state: str, reason: str = "a test") -> httpx.Response:
    return await client.post(
        f"/governance/catalog/{entry}/lifecycle", json={"state": state, "reason": reason, "by": "bob"}, headers=ADMIN
    )


async def _trace(client: httpx.AsyncClient, trace_id: str) -> dict[str, object]:
    [t] = (await client.get("/traces", params={"trace": trace_id}, headers=ADMIN)).json()
    return dict(t)


async def test_declared_agents_and_a_discovered_one_flagged(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        assert (await call(client, "claude", "list_pets")).status_code == 200
        assert (await call(client, "batch-7", "list_pets")).status_code == 200
        assert (await call(client, "stranger", "list_pets")).status_code == 200
        listing = (await client.get("/governance/catalog", headers=ADMIN)).json()
        declared = {a["id"]: a for a in listing["agents"]}
        assert declared["claude"]["owner"] == "alice@example.com"
        assert declared["claude"]["state"] == "active"
        assert declared["claude"]["autonomy"] == "supervised"
        assert declared["batch-*"]["tools"] == ["list_pets"]
        # batch-7 is covered by the glob entry; only `stranger` was never declared
        assert [d["id"] for d in listing["discovered"]] == ["stranger"]
        assert listing["discovered"][0]["discovered"] is True
        assert declared["claude"]["verdict"] == "" and declared["claude"]["scores"] is None  # not evaluated yet
        assert (await client.post("/governance/evaluate", headers=ADMIN)).status_code == 200
        listing = (await client.get("/governance/catalog", headers=ADMIN)).json()
        assert listing["discovered"][0]["verdict"] == "fail"  # undeclared-agent
        assert {a["id"]: a["verdict"] for a in listing["agents"]} == {"claude": "pass", "batch-*": ""}
        assert listing["agents"][0]["scores"]["behaviour"] == 100
        assert (await client.get("/governance/catalog")).status_code == 401  # control plane only


async def test_lifecycle_transitions_record_who_when_why_and_refuse_bad_moves(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        r = await _transition(client, "claude", "suspended", "leaked a key")
        assert r.status_code == 200, r.text
        assert (r.json()["from"], r.json()["state"], r.json()["by"]) == ("active", "suspended", "owner:admin-token")
        assert (await _transition(client, "claude", "proposed")).status_code == 409  # not a lifecycle move
        assert (await _transition(client, "claude", "paused")).status_code == 400
        missing = await client.post(
            "/governance/catalog/claude/lifecycle", json={"state": "active", "by": "bob"}, headers=ADMIN
        )
        assert missing.status_code == 400 and "reason" in missing.json()["error"]
        assert (await _transition(client, "nobody", "active")).status_code == 404
        assert (await _transition(client, "claude", "active", "key rotated")).status_code == 200
        assert (await _transition(client, "claude", "retired", "replaced")).status_code == 200
        assert (await _transition(client, "claude", "active", "again")).status_code == 409  # retired is final
        history = (await client.get("/governance/catalog/claude/lifecycle", headers=ADMIN)).json()
        assert history["state"] == "retired"
        moves = [(h["from"], h["to"], h["by"], h["reason"]) for h in history["history"]]
        assert moves == [
            ("active", "suspended", "owner:admin-token", "leaked a key"),
            ("suspended", "active", "owner:admin-token", "key rotated"),
            ("active", "retired", "owner:admin-token", "replaced"),
        ]
        assert all(h["at"] > 0 for h in history["history"])
        # each transition is in the audit trail too
        events = (await client.get("/traces", params={"tool": "mesh.agent_lifecycle"}, headers=ADMIN)).json()
        assert len(events) == 3


async def test_a_suspended_agent_is_refused_on_rest_decide_and_mcp_before_policy(
    tmp_path: Path, backend: Backend
) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        rpc = await Rpc(client, "claude").open()
        assert (await call(client, "claude", "list_pets")).status_code == 200
        assert (await _transition(client, "claude", "suspended", "under review")).status_code == 200

        rest = await call(client, "claude", "list_pets")
        assert rest.status_code == 403
        assert "suspended" in rest.json()["error"]
        traced = await _trace(client, rest.json()["trace_id"])
        assert (traced["policy"], traced["policy_rule"]) == ("deny", "lifecycle:suspended")

        decided = await client.post("/decide", json={"tool": "list_pets", "arguments": {}}, headers=agent("claude"))
        assert decided.status_code == 403
        assert (decided.json()["action"], decided.json()["rule"]) == ("deny", "lifecycle:suspended")
        traced = await _trace(client, decided.json()["trace_id"])
        assert traced["policy_rule"] == "lifecycle:suspended"

        result = await rpc.call("list_pets", {})
        assert result["isError"] is True
        assert "suspended" in result["content"][0]["text"]
        mcp_traces = (
            await client.get("/traces", params={"agent": "claude", "tool": "list_pets"}, headers=ADMIN)
        ).json()
        assert mcp_traces[0]["policy_rule"] == "lifecycle:suspended"

        # the effective actions the console shows say so too
        decisions = (await client.get("/tools/decisions", params={"agent": "claude"}, headers=ADMIN)).json()
        assert {(d["action"], d["rule"]) for d in decisions} == {("deny", "lifecycle:suspended")}

        # other agents are untouched; the agent is back once active again
        assert (await call(client, "stranger", "list_pets")).status_code == 200
        assert (await _transition(client, "claude", "active", "cleared")).status_code == 200
        assert (await call(client, "claude", "list_pets")).status_code == 200


async def test_a_retired_glob_entry_refuses_every_agent_it_matches(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        rpc = await Rpc(client, "batch-9").open()
        assert (await _transition(client, "batch-*", "retired", "the batch job is gone")).status_code == 200
        rest = await call(client, "batch-1", "list_pets")
        assert rest.status_code == 403
        assert (await _trace(client, rest.json()["trace_id"]))["policy_rule"] == "lifecycle:retired"
        decided = await client.post("/decide", json={"tool": "list_pets"}, headers=agent("batch-2"))
        assert decided.json()["rule"] == "lifecycle:retired"
        result = await rpc.call("list_pets", {})
        assert result["isError"] is True and "retired" in result["content"][0]["text"]
        assert (await call(client, "claude", "list_pets")).status_code == 200


async def test_a_proposed_agent_is_not_refused(tmp_path: Path, backend: Backend) -> None:
    catalog = "id: newbie\nowner: carol\n"  # lifecycle defaults to proposed
    async with mesh_client(governed_mesh(tmp_path, backend, catalog=catalog)) as client:
        listing = (await client.get("/governance/catalog", headers=ADMIN)).json()
        assert listing["agents"][0]["state"] == "proposed"
        assert (await call(client, "newbie", "list_pets")).status_code == 200
        assert (await _transition(client, "newbie", "active", "reviewed")).status_code == 200


async def test_catalog_files_are_edited_through_the_control_plane_and_hot_reloaded(
    tmp_path: Path, backend: Backend
) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        put = await client.put(
            "/governance/catalog/files/research",
            json={"text": "id: researcher\nowner: dana\ntools: [list_pets]\nlifecycle: active\n", "by": "dana"},
            headers=ADMIN,
        )
        assert put.status_code == 200, put.text
        assert put.json()["entries"] == ["researcher"]
        ids = [a["id"] for a in (await client.get("/governance/catalog", headers=ADMIN)).json()["agents"]]
        assert "researcher" in ids
        read = await client.get("/governance/catalog/files/research", headers=ADMIN)
        assert read.json()["text"].startswith("id: researcher")

        # refused whole: an unknown key, a bad lifecycle, a duplicate id, a bad file name
        for text, key in (
            ("id: x\nowner: a\ncolour: red\n", "(entry)"),
            ("id: x\nlifecycle: sleeping\n", "(entry).lifecycle"),
            ("id: claude\n", "id"),
        ):
            bad = await client.put("/governance/catalog/files/bad", json={"text": text}, headers=ADMIN)
            assert bad.status_code == 400, text
            assert bad.json()["key"] == key
        assert not (tmp_path / "catalog" / "bad.yaml").exists()
        assert (
            await client.put("/governance/catalog/files/..x", json={"text": "id: y"}, headers=ADMIN)
        ).status_code == 400

        # an edit on disk is picked up without a restart; a broken one keeps the last good catalog
        (tmp_path / "catalog" / "disk.yaml").write_text("id: from-disk\nowner: erin\n")

        async def has(entry: str) -> bool:
            r = await client.get("/governance/catalog", headers=ADMIN)
            return entry in [a["id"] for a in r.json()["agents"]]

        await eventually(lambda: has("from-disk"), timeout=10, what="the disk edit reloaded")
        (tmp_path / "catalog" / "disk.yaml").write_text("id: [broken\n")

        async def broken() -> bool:
            r = (await client.get("/governance/catalog", headers=ADMIN)).json()
            return bool(r["error"]) and "from-disk" in [a["id"] for a in r["agents"]]

        await eventually(broken, timeout=10, what="the broken edit reported, the last good catalog kept")
        deleted = await client.delete("/governance/catalog/files/disk", headers=ADMIN)
        assert deleted.status_code == 200
        assert not await has("from-disk")

        # every write kept a version
        versions = (await client.get("/governance/versions", params={"kind": "catalog"}, headers=ADMIN)).json()
        names = {v["name"]: v["versions"] for v in versions}
        assert names["research.yaml"] == 1 and names["agents.yaml"] == 1
        assert names["disk.yaml"] >= 2  # written, then removed


async def test_a_catalog_dir_is_required_for_editing(tmp_path: Path, backend: Backend) -> None:
    from flux7.shared.mesh import Mesh
    from flux7.shared.settings import load_settings
    from tests.support.mesh import pets_mesh_config

    mesh = Mesh(load_settings(pets_mesh_config(tmp_path, backend, "name: p\nrules: []\n"), env={}))
    async with mesh_client(mesh) as client:
        r = await client.put("/governance/catalog/files/a", json={"text": CATALOG}, headers=ADMIN)
        assert r.status_code == 501
        assert (await client.get("/governance/catalog", headers=ADMIN)).json()["agents"] == []


async def test_a_write_the_whole_catalog_cannot_load_with_is_undone(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        (tmp_path / "catalog" / "broken.yaml").write_text("id: [broken\n")  # another file, broken on disk
        r = await client.put("/governance/catalog/files/fresh", json={"text": "id: fresh\n"}, headers=ADMIN)
        assert r.status_code == 400 and "broken.yaml" in r.json()["error"]
        assert not (tmp_path / "catalog" / "fresh.yaml").exists()
        ids = [a["id"] for a in (await client.get("/governance/catalog", headers=ADMIN)).json()["agents"]]
        assert ids == ["claude", "batch-*"]  # the last good catalog is still in force
        # the same for a file that existed: its old content comes back
        before = (tmp_path / "catalog" / "agents.yaml").read_text()
        r = await client.put("/governance/catalog/files/agents", json={"text": "id: other\n"}, headers=ADMIN)
        assert r.status_code == 400
        assert (tmp_path / "catalog" / "agents.yaml").read_text() == before


def test_a_missing_catalog_dir_or_rules_file_stops_the_start(tmp_path: Path, backend: Backend) -> None:
    import pytest

    from flux7.shared.errors import ConfigError
    from flux7.shared.settings import load_settings
    from tests.governance.support import governed_config

    config = governed_config(tmp_path, backend)
    text = config.read_text()
    config.write_text(text.replace("catalog_dir: catalog", "catalog_dir: nowhere"))
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert caught.value.key == "catalog_dir"
    config.write_text(text + "governance: {rules_file: missing.yaml}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert caught.value.key == "governance.rules_file"
    config.write_text(text + "governance: {window_days: 0}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert caught.value.key == "governance.window_days"


async def test_a_transition_on_one_worker_is_enforced_by_another(tmp_path: Path, backend: Backend) -> None:
    from flux7.shared.mesh import Mesh

    first = governed_mesh(tmp_path, backend)
    second = Mesh(first.settings)  # another worker over the same database
    try:
        assert second.pipeline.decider.lifecycle_floor("claude") is None
        first.catalog.transition("claude", "suspended", by="bob", reason="incident")
        floor = second.pipeline.decider.lifecycle_floor("claude")
        assert floor is not None and floor.rule == "lifecycle:suspended"
    finally:
        first.db.close()
        second.db.close()


async def test_agents_under_a_glob_entry_are_listed_with_their_own_verdicts(tmp_path: Path, backend: Backend) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend)) as client:
        for who in ("claude", "batch-nightly", "batch-weekly", "stranger"):
            assert (await call(client, who, "list_pets")).status_code == 200
        assert (await call(client, "batch-nightly", "delete_pet", {"petId": "1"})).status_code == 403
        assert (await client.post("/governance/evaluate", headers=ADMIN)).status_code == 200
        listing = (await client.get("/governance/catalog", headers=ADMIN)).json()
        scored = {s["agent"]: s["verdict"] for s in (await client.get("/governance/scores", headers=ADMIN)).json()}
        # the glob entry is still one entry (no verdict of its own) and names the agents it describes
        [glob] = [a for a in listing["agents"] if a["id"] == "batch-*"]
        assert glob["verdict"] == "" and glob["covers"] == ["batch-nightly", "batch-weekly"]
        covered = {c["id"]: c for c in listing["covered"]}
        assert set(covered) == {"batch-nightly", "batch-weekly"}
        nightly = covered["batch-nightly"]
        assert (nightly["entry"], nightly["state"], nightly["owner"]) == ("batch-*", "active", "ops@example.com")
        assert nightly["verdict"] == scored["batch-nightly"] != "" and nightly["scores"]["behaviour"] < 100
        assert [d["id"] for d in listing["discovered"]] == ["stranger"]

        # GET /governance/agents: one row per agent, whichever way the catalog knows it
        r = await client.get("/governance/agents", headers=ADMIN)
        assert r.status_code == 200, r.text
        rows = {a["id"]: a for a in r.json()}
        assert [a["id"] for a in r.json()] == sorted(rows) == ["batch-nightly", "batch-weekly", "claude", "stranger"]
        assert {k: (a["origin"], a["entry"], a["state"]) for k, a in rows.items()} == {
            "batch-nightly": ("covered", "batch-*", "active"),
            "batch-weekly": ("covered", "batch-*", "active"),
            "claude": ("declared", "claude", "active"),
            "stranger": ("discovered", "", "discovered"),
        }
        assert {k: a["verdict"] for k, a in rows.items()} == {k: scored[k] for k in rows}
        assert rows["claude"]["owner"] == "alice@example.com" and rows["claude"]["scores"]["behaviour"] == 100
        # each row opens with the per-agent route, and /governance/catalog keeps answering as before
        for agent_id in rows:
            assert (await client.get(f"/governance/agents/{agent_id}", headers=ADMIN)).status_code == 200
        assert (await client.get("/governance/agents")).status_code == 401  # control plane only
        bad = await client.get("/governance/agents", headers={"Authorization": "Bearer wrong"})
        assert bad.status_code == 401
