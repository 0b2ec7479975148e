"""The console's record (issue 35, items 9-11) in Debian's Chromium against a real `flux7 serve`, with traffic
from nine agents over fifteen tools.

One server for the module: the pets backend (8 tools) and a zoo backend (7 tools, a loopback HTTP server of this
module whose `get_animal` answers 400 to an id that is not a number), a catalog declaring `claude`, `helper` and
the glob entry `batch-*` (which covers `batch-nightly` and `batch-weekly`), nine agents' calls (two of them
failing after the policy allowed them: an upstream 500, an argument 400), a human refusal of `create_pet`, an
emergency stop resumed and one still in force, and memories with long tags beside the decision facts. Each test
runs scenarios of console-spa/e2e/console.e2e.mjs (tests/e2e/test_console.py has the driver), which also fail on
any console error or warning and on axe-core's serious or critical violations of the pages they check.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.e2e.test_console import ADMIN, TOKEN, browser_installed, drive, get
from tests.support.mesh import pets_mesh_config
from tests.support.server import Server, running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import running_backend

__all__ = ["browser_installed"]  # the module's autouse check that Chromium and the npm packages are there

AGENTS = ["claude", "cursor", "helper", "batch-nightly", "batch-weekly", "stranger", "ops-bot", "reporter", "triage"]

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["delete_pet", "retire_animal"]
    action: deny
  - tools: ["create_pet", "feed_animal"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""

CATALOG = """
agents:
  - id: claude
    owner: alice@example.com
    team: pets
    tools: [list_pets, get_pet_by_id, create_pet]
    lifecycle: active
  - id: helper
    owner: bob@example.com
    tools: [list_pets]
  - id: "batch-*"
    owner: ops@example.com
    team: ops
    tools: [list_animals, get_animal]
    lifecycle: active
"""

# The zoo: seven operations; an animal id must be a number (400 otherwise, as a strict API answers bad arguments).
ZOO_OPERATIONS = [
    ("get", "/animals", "listAnimals"),
    ("get", "/animals/{id}", "getAnimal"),
    ("post", "/animals/{id}/feed", "feedAnimal"),
    ("get", "/animals/{id}/weight", "weighAnimal"),
    ("post", "/animals/{id}/move", "moveAnimal"),
    ("post", "/animals/{id}/vaccinate", "vaccinateAnimal"),
    ("delete", "/animals/{id}", "retireAnimal"),
]


def zoo_spec() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for method, path, op in ZOO_OPERATIONS:
        params = (
            [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}] if "{id}" in path else []
        )
        paths.setdefault(path, {})[method] = {"operationId": op, "summary": op, "parameters": params}
    return {"openapi": "3.0.3", "info": {"title": "zoo", "version": "1"}, "paths": paths}


@contextmanager
def running_zoo() -> Iterator[str]:
    class Zoo(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            parts = self.path.split("?")[0].strip("/").split("/")
            animal = parts[1] if len(parts) > 1 else ""
            status, body = (200, {"ok": True, "path": self.path})
            if animal and not animal.isdigit():
                status, body = 400, {"error": f"invalid animal id {animal!r}: a number"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Zoo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def call(server: Server, who: str, tool: str, params: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(
        f"{server.url}/tool/{tool}",
        json={"params": params or {}},
        headers={"Authorization": f"Bearer agent:{who}", "X-Session-Id": f"{who}-session"},
        timeout=120,
        trust_env=False,
    )


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=ADMIN, timeout=30, trust_env=False)


def rpc(server: Server, tool: str, arguments: dict[str, Any]) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    r = post(server, "/rpc", body)
    assert r.status_code == 200, r.text
    return str(r.json()["result"]["content"][0]["text"])


def pending_ids(server: Server, tool: str) -> list[str]:
    return [a["id"] for a in get(server, "/approvals", status="pending", tool=tool)]


def waiting_call(pool: ThreadPoolExecutor, server: Server, who: str, tool: str, params: dict[str, Any]) -> str:
    """Starts a call that waits for a human; returns its approval id once it is pending."""
    before = set(pending_ids(server, tool))
    pool.submit(call, server, who, tool, params)
    found: list[str] = []

    def new() -> bool:
        found[:] = [a for a in pending_ids(server, tool) if a not in before]
        return bool(found)

    wait_until(new, timeout=20, what=f"{who}'s {tool} to wait for approval")
    return found[0]


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory, module_database_url: str) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("record")
    (tmp / "catalog").mkdir()
    (tmp / "catalog" / "agents.yaml").write_text(CATALOG)
    (tmp / "zoo.json").write_text(json.dumps(zoo_spec()))
    with running_backend() as backend, running_zoo() as zoo:
        extra = "\n".join(
            [
                "  - file: zoo.json",  # a second OpenAPI upstream, under the `openapi:` list pets_mesh_config opens
                f"    backend_url: {zoo}",
                "catalog_dir: catalog",
                f"database: {module_database_url}" if module_database_url else "",
            ]
        )
        cfg = pets_mesh_config(
            tmp,
            backend,
            POLICY,
            approval_timeout=120,
            admin_token=TOKEN,
            memory="{enabled: true, hybrid: false}",
            extra=extra,
        )
        with running_server(cfg) as s, ThreadPoolExecutor(8) as pool:
            tools = {t["name"] for t in get(s, "/tools")}
            assert len(tools) == 15, sorted(tools)
            ok = [
                ("claude", "list_pets", {}),
                ("claude", "get_pet_by_id", {"petId": "1"}),
                ("cursor", "list_animals", {}),
                ("helper", "list_pets", {}),
                ("batch-nightly", "list_animals", {}),
                ("batch-nightly", "get_animal", {"id": "7"}),
                ("batch-weekly", "list_animals", {}),
                ("stranger", "get_text", {}),
                ("ops-bot", "echo_headers", {}),
                ("ops-bot", "weigh_animal", {"id": "3"}),
                ("reporter", "list_pets", {}),
                ("triage", "move_animal", {"id": "4"}),
                ("triage", "vaccinate_animal", {"id": "4"}),
            ]
            for who, tool, params in ok:
                assert call(s, who, tool, params).status_code == 200, (who, tool)
            assert call(s, "batch-nightly", "delete_pet", {"petId": "1"}).status_code == 403
            assert call(s, "batch-nightly", "retire_animal", {"id": "2"}).status_code == 403
            upstream = call(s, "claude", "get_boom")  # the upstream answers 500
            bad_args = call(s, "cursor", "get_animal", {"id": "rex"})  # the upstream refuses the argument: 400
            assert upstream.status_code == 502 and bad_args.status_code == 502, (upstream.text, bad_args.text)

            # a human refuses claude's create_pet: a precedent that blocks auto-approval; one approves cursor's
            # feed_animal (the precedent the Forget test forgets)
            refused = waiting_call(pool, s, "claude", "create_pet", {"name": "Nope"})
            assert post(s, f"/approvals/{refused}/deny", {"resolved_by": "bob", "reasoning": "no new pets"}).is_success
            fed = waiting_call(pool, s, "cursor", "feed_animal", {"id": "5"})
            assert post(s, f"/approvals/{fed}/approve", {"resolved_by": "carol"}).is_success

            # an emergency stop of triage, resumed; one of ops-bot, still in force; each held a grant
            for agent in ("triage", "ops-bot"):
                assert post(s, "/grants", {"agent": agent, "tools": "get_*", "duration": "1h"}).status_code == 201
            stop = post(s, "/halts", {"scope": "agent", "target": "triage", "reason": "loop in e2e"})
            assert stop.status_code in (200, 201), stop.text
            resumed = post(s, f"/halts/{stop.json()['halt']['id']}/resume", {})
            assert resumed.status_code == 200, resumed.text
            held = post(s, "/halts", {"scope": "agent", "target": "ops-bot", "reason": "still stopped"})
            assert held.status_code in (200, 201), held.text

            # memories with long tags, beside the decision fact of the refusal
            rpc(
                s,
                "memory_store",
                {"key": "pets.tortoise", "value": "Zeno eats dandelions", "tags": ["pets", "reptiles"]},
            )
            long_tags = ["zoo", "a-very-long-tag-name-that-needs-room-on-a-phone", "another:tag:with:many:colons:in:it"]
            rpc(s, "memory_store", {"key": "zoo.feeding-schedule", "value": "Feed at nine", "tags": long_tags})
            r = httpx.post(f"{s.url}/governance/evaluate", json={}, headers=ADMIN, timeout=60, trust_env=False)
            assert r.status_code == 200, r.text
            yield {"server": s, "pool": pool, "upstream": upstream.json(), "bad_args": bad_args.json()}
            for approval in get(s, "/approvals", status="pending"):  # nothing left waiting on the pool
                post(s, f"/approvals/{approval['id']}/deny", {})


def test_the_catalog_lists_the_agents_a_glob_entry_covers_with_their_verdicts(record: dict[str, Any]) -> None:
    server = record["server"]
    report = drive(server, "record-catalog")
    rows = {r["id"]: r for r in report["rows"]}
    scored = {s["agent"]: s["verdict"] for s in get(server, "/governance/scores")}
    # batch-nightly and batch-weekly were scored; each has its row under the glob entry, with its own verdict
    for agent in ("batch-nightly", "batch-weekly"):
        assert rows[agent]["origin"] == "covered" and "under batch-*" in rows[agent]["text"], rows[agent]
        assert rows[agent]["verdict"] == scored[agent] != "", (agent, rows[agent], scored)
    # the glob entry is one entry naming how many agents it covers, not a "not scored" agent
    assert rows["batch-*"]["verdict"] == "glob" and rows["batch-*"]["badge"] == "covers 2 agents"
    assert "not scored" not in rows["batch-*"]["text"]
    # every agent the list route knows has a row
    listed = {a["id"] for a in get(server, "/governance/agents")}
    assert listed == set(AGENTS) and listed <= set(rows)


def test_without_a_token_the_overview_says_it_cannot_see_the_waiting_calls(record: dict[str, Any]) -> None:
    server, pool = record["server"], record["pool"]
    waiting = [waiting_call(pool, server, who, "create_pet", {"name": f"Pet of {who}"}) for who in AGENTS[1:6]]
    try:
        report = drive(server, "record-no-token")
    finally:
        for approval in waiting:
            post(server, f"/approvals/{approval}/deny", {})
    before = report["before"]
    assert "0" not in before["kpi"].split() and "cannot see" in before["kpi"] and "not authorised" in before["kpi"]
    assert before["kpiHref"] == "#/settings"
    assert before["conn"] == "warn" and "not authorised" in before["connText"] and before["connHref"] == "#/settings"
    assert "Not authorised: no admin token is set." in before["pending"] and "Settings" in before["pending"]
    # with the token the same page counts the five calls and the dot turns green
    assert report["after"]["kpi"].split()[0] == "5" and report["after"]["conn"] == "ok"


def test_the_precedent_summary_counts_the_refusal_its_rows_show(record: dict[str, Any]) -> None:
    server, pool = record["server"], record["pool"]
    approval = waiting_call(pool, server, "claude", "create_pet", {"name": "Again"})
    try:
        report = drive(server, "record-precedents", approval=approval)
        explained = get(server, f"/approvals/{approval}/precedents")
    finally:
        post(server, f"/approvals/{approval}/deny", {})
    denied = [r for r in report["rows"] if r["key"] == "denied-human"]
    assert denied and all("blocks auto-approval" in r["counts"] for r in denied), report["rows"]
    assert report["refusals"] == len(denied) == 1 and "refusals: 1" in report["rule"]
    assert explained["rule"]["refusals"] == 0  # the server's rule stopped at "not a read tool": the rows tell
    assert "not a read tool" in report["rule"]


def test_the_stop_history_names_who_resumed_and_holds_grants_only_while_in_force(record: dict[str, Any]) -> None:
    report = drive(record["server"], "record-halts")
    rows = {r["scope"].split()[-1]: r for r in report["rows"]}
    resumed, active = rows["triage"], rows["ops-bot"]
    # the resumer is the credential that resumed it (the admin token here), as the server recorded it
    [halt] = [h for h in get(record["server"], "/halts", status="all") if h.get("target") == "triage"]
    assert halt["resumed_by"] == "owner:admin-token"
    assert resumed["state"] == "resumed" and f"by {halt['resumed_by']}" in resumed["stateText"]
    assert "ago" in resumed["stateText"]
    assert "held" not in resumed["stateText"]
    assert active["state"] == "active" and "1 grant(s) held until resumed" in active["stateText"]


def test_a_failed_call_shows_its_outcome_beside_the_allow_that_let_it_through(record: dict[str, Any]) -> None:
    report = drive(
        record["server"], "record-traces", upstreamTool="get_boom", argsTool="get_animal", argsAgent="cursor"
    )
    for name, status in (("upstream", 500), ("args", 400)):
        badges = {b["text"]: b for b in report[name]}
        assert "allow" in badges and f"failed {status}" in badges, report[name]
        assert "badge-bad" in badges[f"failed {status}"]["cls"] and str(status) in badges[f"failed {status}"]["title"]
    assert [b["text"] for b in report["ok"]] == ["allow"]


def test_the_graph_with_fifteen_tools_draws_no_label_over_another(record: dict[str, Any]) -> None:
    report = drive(record["server"], "record-graph")  # the driver also fails on cytoscape's console warning
    assert report["tools"] == 15 and set(report["agents"]) >= {f"agent:{a}" for a in AGENTS}  # and the glob entry
    assert report["overlaps"] == []


def test_memory_on_a_phone_wraps_tags_shows_times_and_hides_decision_facts_until_asked(
    record: dict[str, Any],
) -> None:
    report = drive(record["server"], "record-memory")
    hidden, shown = report["hidden"], report["shown"]
    assert set(hidden["keys"]) == {"pets.tortoise", "zoo.feeding-schedule"}
    assert hidden["count"] >= 1 and "decision facts hidden" in hidden["note"]
    assert any(k.startswith("decision.create_pet.") for k in shown["keys"])
    assert shown["layout"] == {"clashes": [], "outside": [], "scrollsSideways": False}
    text = shown["text"]
    assert not [w for w in text.split() if w.removeprefix("at:").isdigit() and len(w.removeprefix("at:")) >= 12]
    assert "at " in text and "sig:" in text and "…" in text


def test_forms_submit_on_enter_and_say_what_is_wrong(record: dict[str, Any]) -> None:
    server, pool = record["server"], record["pool"]
    approval = waiting_call(pool, server, "reporter", "create_pet", {"name": "Enter"})
    bad_policy = POLICY.replace("    action: human_approval", "    action: maybe")
    line = bad_policy.splitlines().index("    action: maybe") + 1
    try:
        report = drive(
            server,
            "record-forms",
            approval=approval,
            reasoning="fine by enter",
            badGlob="batch-[",
            badDuration="1 hour",
            file="agents",
            badPolicy=bad_policy,
        )
    finally:
        if get(server, f"/approvals/{approval}")["status"] == "pending":
            post(server, f"/approvals/{approval}/deny", {})
    decided = get(server, f"/approvals/{approval}")
    assert decided["status"] == "approved" and decided["reasoning"] == "fine by enter"
    assert "not a valid glob" in report["glob"]["alert"] and "never closed" in report["glob"]["alert"]
    assert report["glob"]["noMatch"] == 0
    grant = report["grant"]
    assert "is not a duration" in grant["message"] and grant["disabled"] and grant["invalid"] == "true"
    # the server names the key (rules[1].action); the editor marks its line
    refused = httpx.put(
        f"{server.url}/policy-files/agents", json={"text": bad_policy}, headers=ADMIN, timeout=30, trust_env=False
    )
    assert refused.status_code == 400 and refused.json()["key"] == "rules[1].action"
    policy = report["policy"]
    assert policy["marked"] == line == int(policy["lineButton"]) and "rules[1].action" in policy["note"]
    assert policy["selected"] == "    action: maybe"
    assert get(server, "/policy-files/agents")["text"] == POLICY  # nothing was written


def test_forget_is_an_outlined_danger_button_that_asks_first(record: dict[str, Any]) -> None:
    server = record["server"]
    assert any(p["tool"] == "feed_animal" for p in get(server, "/approvals/precedents")["precedents"])
    report = drive(server, "record-forget", tool="feed_animal", memoryKey="pets.tortoise")
    for where in ("precedents", "memory"):
        look = report[where]
        assert "btn-danger" in look["cls"] and look["bg"] in ("rgba(0, 0, 0, 0)", "transparent"), (where, look)
    assert report["precedents"]["bg"] != report["precedents"]["primary"]
    assert "Forget the decisions for feed_animal by cursor?" in report["precedents"]["question"]
    assert report["precedents"]["afterDismiss"] == 1  # dismissed: still there


def test_the_tools_page_says_pinning_is_not_configured_and_asks_once(record: dict[str, Any]) -> None:
    report = drive(record["server"], "record-pins")
    assert "not configured" in report["first"]["note"] and report["first"]["errors"] == 0
    assert report["asked"] == 1 and report["leftExpected"] == 0  # one 501, logged by Chromium itself; not again


def test_the_console_is_sent_compressed_then_cached_and_an_idle_tab_costs_little(record: dict[str, Any]) -> None:
    report = drive(record["server"], "record-traffic")
    first = report["firstLoad"]
    assert {a["encoding"] for a in report["firstAssets"]} == {"br"} and len(report["firstAssets"]) >= 2
    assert {a["cache"] for a in report["firstAssets"]} == {"public, max-age=31536000, immutable"}
    assert first["assetBytes"] < 130_000, first  # 438 KB uncompressed
    second = report["secondLoad"]
    assert second["assetBytes"] < 2_000, second  # index.html's 304, the assets from the browser's cache
    # unchanged lists are revalidated (the browser shows the page a 200 from its cache): headers only on the wire,
    # where a /traces of nine agents' calls is ~60 KB
    visible = report["visible"]
    assert visible["api"] >= 4 and set(visible["statuses"]) == {200}, visible
    for path, seen in visible["byPath"].items():
        assert seen["bytes"] / seen["requests"] < 600, (path, seen)
    assert report["hidden"]["requests"] == 0, report["hidden"]
