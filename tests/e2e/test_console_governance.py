"""The governance pages of the console (Catalog, Agent detail, Graph, Diff and replay) in Debian's Chromium
against a real `flux7 serve`, over traffic made for the purpose.

One server for the module: the pets backend, a catalog declaring `claude` (active, with an owner) and `helper`
(proposed), calls by `claude` (a read, a denied delete, two upstream failures) and by `stranger` (never
declared). Each test runs one scenario of console-spa/e2e/console.e2e.mjs (tests/e2e/test_console.py has the
driver) and checks what the browser saw against the server's own answers. Each scenario leaves a screenshot
of its page in console-spa/screenshots/e2e/gov-*.png, beside the other e2e screenshots.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_console import ADMIN, TOKEN, browser_installed, drive, get
from tests.support.mesh import PETS_POLICY, pets_mesh_config
from tests.support.server import REPO, Server, running_server
from tests.upstreams.servers.http_backend import running_backend

__all__ = ["browser_installed"]  # the module's autouse check that Chromium and the npm packages are there

SHOTS = REPO / "console-spa" / "screenshots" / "e2e"

CATALOG = """
agents:
  - id: claude
    name: Claude the pet clerk
    owner: alice@example.com
    team: pets
    purpose: answer questions about pets
    environment: prod
    model: claude-sonnet
    tools: [list_pets, get_pet_by_id]
    upstreams: [spec.json]
    autonomy: supervised
    lifecycle: active
  - id: helper
    owner: bob@example.com
    team: ops
    tools: [list_pets]
"""

# The proposed policy: get_boom joins the deny rule (claude called it twice, so two decisions change).
TIGHTER = PETS_POLICY.replace('tools: ["delete_pet"]', 'tools: ["delete_pet", "get_boom"]')


def call(server: Server, who: str, tool: str, params: dict[str, Any] | None = None) -> int:
    r = httpx.post(
        f"{server.url}/tool/{tool}",
        json={"params": params or {}},
        headers={"Authorization": f"Bearer agent:{who}", "X-Session-Id": f"{who}-session"},
        timeout=30,
        trust_env=False,
    )
    return r.status_code


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, module_database_url: str) -> Iterator[Server]:
    assert 'tools: ["delete_pet"]' in PETS_POLICY and TIGHTER != PETS_POLICY
    tmp = tmp_path_factory.mktemp("gov")
    (tmp / "catalog").mkdir()
    (tmp / "catalog" / "agents.yaml").write_text(CATALOG)
    with running_backend() as backend:
        cfg = pets_mesh_config(
            tmp,
            backend,
            PETS_POLICY,
            admin_token=TOKEN,
            memory="{enabled: true, hybrid: false}",
            extra="catalog_dir: catalog" + (f"\ndatabase: {module_database_url}" if module_database_url else ""),
        )
        with running_server(cfg) as s:
            assert call(s, "claude", "list_pets") == 200
            assert call(s, "claude", "delete_pet", {"petId": "1"}) == 403
            assert call(s, "claude", "get_boom") == 502
            assert call(s, "claude", "get_boom") == 502
            assert call(s, "stranger", "list_pets") == 200
            r = httpx.post(f"{s.url}/governance/evaluate", json={}, headers=ADMIN, timeout=30, trust_env=False)
            assert r.status_code == 200, r.text
            yield s


def screenshot(name: str) -> None:
    png = SHOTS / f"{name}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_the_catalog_page_lists_declared_and_discovered_agents_with_verdicts_and_filters(server: Server) -> None:
    report = drive(server, "gov-catalog")
    listing = get(server, "/governance/catalog")
    want = {a["id"]: (a["verdict"] or "none", a["state"]) for a in listing["agents"]}
    want |= {d["id"]: (d["verdict"] or "none", "discovered") for d in listing["discovered"]}
    rows = {r["id"]: r for r in report["rows"]}
    assert {k: (r["verdict"], r["state"]) for k, r in rows.items()} == want
    assert set(rows) == {"claude", "helper", "stranger"}
    assert rows["stranger"]["flagged"] and not rows["claude"]["flagged"]
    assert rows["stranger"]["verdict"] == "fail" and "badge-bad" in rows["stranger"]["verdictClass"]
    assert rows["helper"]["state"] == "proposed"
    assert rows["claude"]["href"] == "#/catalog/claude"
    assert [r["id"] for r in report["failing"]] == [k for k, (v, _) in want.items() if v == "fail"]
    assert [r["id"] for r in report["discovered"]] == ["stranger"]
    assert [r["id"] for r in report["byOwner"]] == ["claude"] and "who=alice" in report["url"]
    screenshot("gov-catalog")


def test_the_agent_page_shows_scores_findings_with_traces_and_moves_the_lifecycle(server: Server) -> None:
    detail = get(server, "/governance/agents/claude")
    report = drive(server, "gov-agent", agent="claude", state="suspended", reason="incident 42 in e2e")
    seen = {f["rule"]: f for f in report["findings"]}
    assert set(seen) == {f["rule"] for f in detail["findings"]} and "declared-drift" in seen
    for f in detail["findings"]:
        assert seen[f["rule"]]["severity"] == f["severity"]
        assert seen[f["rule"]]["evidence"] == [f"#/traces?trace={t}" for t in f["evidence"]]
        assert seen[f["rule"]]["fix"] == f["remediation"]
    s = detail["scores"]
    assert f"Behaviour {s['behaviour']} to {s['behaviour']}" in report["chart"]
    assert report["points"] == len(detail["history"]) >= 1
    assert "alice@example.com" in report["facts"] and "list_pets, get_pet_by_id" in report["facts"]
    trace_id = report["evidenceHref"].split("trace=")[1]
    assert trace_id in report["tracePage"] and "claude" in report["tracePage"]
    # The move from the browser is recorded by the server, and the floor refuses the agent at once.
    assert report["moved"].startswith("claude: active → suspended")
    assert report["stateNow"] == "suspended" and "incident 42 in e2e" in report["history"][0]
    lifecycle = get(server, "/governance/catalog/claude/lifecycle")
    assert lifecycle["state"] == "suspended"
    assert (
        lifecycle["history"][-1]["reason"] == "incident 42 in e2e"
        and lifecycle["history"][-1]["by"] == "owner:admin-token"
    )
    assert call(server, "claude", "list_pets") == 403
    r = httpx.post(
        f"{server.url}/governance/catalog/claude/lifecycle",
        json={"state": "active", "reason": "e2e cleanup"},
        headers=ADMIN,
        timeout=10,
        trust_env=False,
    )
    assert r.status_code == 200, r.text
    screenshot("gov-agent-detail")


def test_the_graph_page_draws_zooms_filters_and_shows_a_nodes_impact(server: Server) -> None:
    graph = get(server, "/governance/graph")
    report = drive(server, "gov-graph", node="tool:get_boom", canvasNode="agent:stranger")
    n, e = len(graph["nodes"]), len(graph["edges"])
    assert report["all"] == f"{n} nodes, {e} edges"
    assert report["canvases"] >= 1  # cytoscape drew on canvas layers
    assert report["zoomIn"] > report["zoom0"] and report["zoomWheel"] < report["zoomIn"]
    tools = {x["id"] for x in graph["nodes"] if x["type"] == "tool"}
    assert not tools & set(report["listedWithoutTools"]) and report["listedWithoutTools"]
    assert report["withoutTools"].startswith(f"{n - len(tools)} nodes")
    # A click on the canvas selects the node under the pointer.
    stranger = get(server, "/governance/impact", kind="agent", name="stranger")
    assert "node=agent%3Astranger" in report["canvasImpact"]["url"]
    assert report["canvasImpact"]["calls"] == stranger["calls"] == 1
    impact = get(server, "/governance/impact", kind="tool", name="get_boom")
    assert (report["impactCalls"], report["impactSessions"]) == (impact["calls"], impact["sessions"]) == (2, 1)
    assert "claude" in report["impactText"] and "node=tool%3Aget_boom" in report["url"]
    screenshot("gov-graph")


def test_replay_then_apply_a_draft_then_the_diff_breaking_first_side_by_side(server: Server) -> None:
    report = drive(server, "gov-diff-replay", file="agents", proposed=TIGHTER, draft="no-boom-e2e")
    assert "2 would change" in report["status"], report["status"]
    assert [g["agent"] for g in report["groups"]] == ["claude"]
    [row] = report["groups"][0]["rows"]
    assert row["tool"] == "get_boom" and "allow → deny" in row["text"]
    assert "Applied no-boom-e2e" in report["applied"]
    # the diff pane turned to the applied file by itself (it stayed on "choose…")
    assert report["diffName"] == "agents.yaml" and "name=agents.yaml" in report["diffUrl"]
    [draft] = [d for d in get(server, "/governance/drafts") if d["name"] == "no-boom-e2e"]
    assert draft["applied_at"] and draft["files"] == {"agents.yaml": TIGHTER}
    assert call(server, "helper", "get_boom") == 403  # the applied policy decides live
    diff = get(server, "/governance/diff", kind="policy", name="agents.yaml")
    classes = [c["cls"] for c in report["classes"]]
    assert classes == sorted(classes, key=["breaking", "expanding", "neutral"].index)
    assert classes[0] == "breaking" and "claude -> get_boom" in report["classes"][0]["text"]
    assert len(classes) == len(diff["changes"])
    assert report["changedLines"] == [
        {"before": '  - tools: ["delete_pet"]', "after": '  - tools: ["delete_pet", "get_boom"]'}
    ]
    left, right = report["sideBySide"]
    assert left == right  # the diff and the replay panes side by side at laptop width
    screenshot("gov-replay")
    screenshot("gov-diff-replay")
