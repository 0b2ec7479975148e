"""The console in a real browser against a real `flux7 serve`.

Each test starts `flux7 serve` (granian, loopback) over the pets backend with the memory role on, then runs
console-spa/e2e/console.e2e.mjs, which drives Debian's Chromium through playwright-core and prints what it saw
as JSON. The browser does what an operator would (Settings, Approvals, Grants, Emergency stop, Memory); this
file plays the agents (POST /tool, /rpc) and checks the server's side with httpx.

Needs `apt-get install -y chromium` and `cd console-spa && npm ci` (CI does both): without them the tests
fail and say so, they never skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.functions.conftest import AGENT, make_config
from tests.support.http import serve_json, wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.oauth import OAuthPlayer, Pkce, query_of
from tests.support.server import REPO, Server, running_server
from tests.upstreams.servers.http_backend import Backend

CONSOLE = REPO / "console-spa"
SCRIPT = CONSOLE / "e2e" / "console.e2e.mjs"
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "e2e-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module", autouse=True)
def browser_installed() -> None:
    """Fail (never skip) with the install command when a piece the browser tests need is missing."""
    missing = []
    if shutil.which("node") is None:
        missing.append("node is not on PATH: apt-get install -y nodejs npm")
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} is missing: apt-get install -y chromium")
    if not (CONSOLE / "node_modules" / "playwright-core" / "package.json").exists():
        missing.append("console-spa/node_modules lacks playwright-core: cd console-spa && npm ci")
    if not (CONSOLE / "dist" / "index.html").exists():
        missing.append("console-spa/dist is missing: cd console-spa && npm ci && npm run build")
    if missing:
        pytest.fail("the console e2e tests need:\n  " + "\n  ".join(missing), pytrace=False)


def console_config(tmp_path: Path, backend: Backend, extra: str = "") -> Path:
    """tests/functions' config with the memory role on, an admin token, and approvals that outlast a browser."""
    cfg = make_config(tmp_path, backend, f"auth: {{admin_token: {TOKEN}}}\n{extra}")
    text = cfg.read_text()
    for old, new in (
        ("memory: {enabled: false}", "memory: {enabled: true, hybrid: false}"),
        ("timeout_seconds: 5", "timeout_seconds: 90"),
    ):
        assert old in text, f"make_config no longer writes {old!r}"
        text = text.replace(old, new)
    cfg.write_text(text)
    return cfg


@pytest.fixture
def server(tmp_path: Path, backend: Backend, engine_configs: str) -> Iterator[Server]:
    with running_server(console_config(tmp_path, backend)) as s:
        yield s


def drive(server: Server, scenario: str, token: str = TOKEN, **params: Any) -> dict[str, Any]:
    """Runs one browser scenario; returns its JSON report, failing with the script's own words."""
    proc = subprocess.run(
        ["node", str(SCRIPT), scenario, "--base", server.url, "--token", token, "--params", json.dumps(params)],
        capture_output=True,
        text=True,
        cwd=CONSOLE,
        timeout=120,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{scenario}: no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    shot = f"console-spa/screenshots/e2e/failed-{scenario}.png"
    detail = f"{report.get('error')}\n{proc.stderr[-4000:]}\n(the page at that moment: {shot})"
    assert proc.returncode == 0 and report["ok"], f"{scenario} failed in the browser: {detail}"
    return report


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=ADMIN, timeout=10, trust_env=False)


def get(server: Server, path: str, **query: Any) -> Any:
    r = httpx.get(f"{server.url}{path}", params=query, headers=ADMIN, timeout=10, trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()


def call(server: Server, tool: str, params: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    url, body = f"{server.url}/tool/{tool}", {"params": params}
    return httpx.post(url, json=body, headers={**AGENT, **(headers or {})}, timeout=120, trust_env=False)


def rpc(server: Server, tool: str, arguments: dict[str, Any]) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    r = post(server, "/rpc", body)
    assert r.status_code == 200, r.text
    return str(r.json()["result"]["content"][0]["text"])


def pending(server: Server, tool: str) -> str:
    """Waits until a call of `tool` waits for approval; returns the approval id."""
    found: list[str] = []

    def seen() -> bool:
        found[:] = [a["id"] for a in get(server, "/approvals", status="pending", tool=tool)]
        return bool(found)

    wait_until(seen, timeout=20)
    return found[0]


def trace(server: Server, trace_id: str) -> dict[str, Any]:
    [t] = get(server, "/traces", trace=trace_id)
    return dict(t)


def test_a_pending_approval_shows_in_the_console_and_approving_it_there_releases_the_call(server: Server) -> None:
    with ThreadPoolExecutor(1) as pool:
        blocked: Future[httpx.Response] = pool.submit(call, server, "create_pet", {"name": "Kit"})
        approval = pending(server, "create_pet")
        assert not blocked.done()
        try:
            report = drive(server, "approve", tool="create_pet", reasoning="looks fine to me")
        finally:
            if not blocked.done():  # a failed scenario must not leave the call waiting out its 90 s
                post(server, f"/approvals/{approval}/deny", {"reasoning": "cleanup"})
        resp = blocked.result(timeout=30)
    assert approval.startswith(report["approval_prefix"])
    assert "approved" in report["history_row"] and "looks fine to me" in report["history_row"]
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["policy"] == "human_approval" and body["approval_id"] == approval
    assert body["result"] == {"created": {"name": "Kit"}}
    t = trace(server, body["trace_id"])
    # The resolver is the credential the console holds: the admin token, a human resolver.
    assert t["approval_status"] == "approved" and t["approved_by"] == "owner:admin-token"
    assert t["supervisor_reasoning"] == "looks fine to me"
    a = get(server, f"/approvals/{approval}")
    assert a["status"] == "approved" and a["reasoning"] == "looks fine to me"


def test_a_human_approves_an_oauth_client_on_the_consent_page_and_the_client_gets_its_code(server: Server) -> None:
    with (
        serve_json(lambda *_: (200, {"ok": True})) as (callback_base, hits),
        httpx.Client(base_url=server.url, trust_env=False, timeout=30) as http,
    ):
        callback = f"{callback_base}/callback"
        oauth = OAuthPlayer(http, server.url, human=dict(ADMIN))
        client_id = oauth.register(client_name="Claude in a browser", redirect_uris=[callback])["client_id"]
        pkce = Pkce()
        request_id = oauth.consent_request(client_id, pkce, redirect_uri=callback)
        report = drive(server, "oauth-consent", request=request_id, agent="claude-browser", callback=callback)
        assert "Claude in a browser" in report["shown"] and urlsplit(callback).netloc in report["shown"]
        assert re.search(r"\(expires in 1[45]m\)", report["shown"]), report["shown"]  # oauth.consent_seconds: 15 min
        answer = query_of(report["url"])
        assert answer["state"] == "st4te" and answer["iss"] == server.url and hits
        tokens = oauth.exchange(client_id, answer["code"], pkce, redirect_uri=callback)
        assert tokens.status_code == 200, tokens.text
    [connection] = [c for c in get(server, "/oauth/tokens") if c["client_id"] == client_id]
    assert connection["agent_id"] == "claude-browser" and connection["granted_by"] == "owner:admin-token"


def test_a_grant_created_in_the_console_lifts_the_approval_of_the_next_call(server: Server) -> None:
    report = drive(server, "grant", agent="claude", tools="create_pet", duration="15m")
    grant_id = report["grant_id"]
    assert "Granted create_pet to claude" in report["status"]
    [g] = get(server, "/grants")
    assert g["id"] == grant_id and g["agent"] == "claude" and g["tools"] == "create_pet"
    started = time.monotonic()
    resp = call(server, "create_pet", {"name": "Kit"})
    # At once: nothing waited for the 90 s approval timeout.
    assert time.monotonic() - started < 10
    assert resp.status_code == 200 and resp.json()["policy"] == "allow", resp.text
    assert trace(server, resp.json()["trace_id"])["policy_rule"] == f"grant:{grant_id}"
    assert get(server, "/approvals", status="all") == []


def test_an_emergency_stop_from_the_console_bans_every_page_and_calls_until_resumed(server: Server) -> None:
    assert call(server, "list_pets", {}).status_code == 200
    routes = ["#/", "#/traces", "#/grants", "#/memory", "#/settings"]
    report = drive(server, "halt-stop", reason="runaway loop in e2e", routes=routes)
    assert set(report["banners"]) == set(routes)
    for text in report["banners"].values():
        assert "Emergency stop in force" in text and "runaway loop in e2e" in text
    [halt] = get(server, "/halts")
    assert halt["scope"] == "all" and halt["created_by"] == "owner:admin-token"
    stopped = call(server, "list_pets", {})
    assert stopped.status_code == 403 and stopped.json()["policy"] == "halted", stopped.text
    assert "halted" in stopped.json()["error"]

    report = drive(server, "halt-resume", reason="runaway loop in e2e", routes=["#/", "#/traces", "#/memory"])
    assert report["clear"] == ["#/", "#/traces", "#/memory"]
    assert get(server, "/halts") == []
    assert call(server, "list_pets", {}).status_code == 200


def test_memory_search_in_the_console_finds_an_entry_stored_over_rpc(server: Server) -> None:
    entry = {"key": "pets.tortoise", "value": "Zeno the tortoise eats dandelions", "tags": ["pets"]}
    stored = rpc(server, "memory_store", entry)
    assert stored.startswith("Memory 'pets.tortoise' created")
    rpc(server, "memory_store", {"key": "deploy.region", "value": "the service runs in Frankfurt"})
    report = drive(server, "memory-search", query="tortoise")
    assert report["keys"] == ["pets.tortoise"]
    assert report["values"] == ["Zeno the tortoise eats dandelions"]
    assert report["summary"].startswith("1 results")


def test_a_wrong_admin_token_is_refused_with_a_clear_message(server: Server) -> None:
    assert call(server, "list_pets", {}).status_code == 200
    report = drive(server, "wrong-token", wrong="not-the-token")
    probes = "\n".join(report["probes"])
    assert "Mesh reachable (GET /health): ok" in probes
    assert "Admin token accepted (GET /grants): refused the token (401)" in probes
    assert "The server refused the admin token." in report["panel"] and "Settings" in report["panel"]
    assert "Cannot check for emergency stops: the server refused the admin token." in report["banner"]
    # With the right token the same page shows the call.
    assert "list_pets" in report["after"]


# get_pet_by_id reads (precedents may lift it), create_pet writes (never lifted): both ask first.
BADGE_POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["get_pet_by_id", "create_pet"]
    action: human_approval
  - tools: ["list_pets"]
    action: allow
"""


def put(server: Server, path: str, body: dict[str, Any]) -> None:
    r = httpx.put(f"{server.url}{path}", json=body, headers=ADMIN, timeout=10, trust_env=False)
    assert r.status_code == 200, r.text


def decided(server: Server, pool: ThreadPoolExecutor, tool: str, params: dict[str, Any], verb: str, by: str) -> str:
    """A call that waits for approval, settled over REST as `by`; returns its approval id."""
    blocked = pool.submit(call, server, tool, params)
    approval = pending(server, tool)
    r = post(server, f"/approvals/{approval}/{verb}", {"resolved_by": by})
    assert r.status_code == 200, r.text
    assert blocked.result(timeout=30).status_code == (200 if verb == "approve" else 403)
    return approval


def test_each_approval_state_has_its_own_badge_in_the_browser(
    tmp_path: Path, backend: Backend, engine_configs: str
) -> None:
    cfg = pets_mesh_config(
        tmp_path,
        backend,
        BADGE_POLICY,
        approval_timeout=90,
        admin_token=TOKEN,
        memory="{enabled: true, hybrid: false}",
        trace_file=True,
    )
    with running_server(cfg) as server, ThreadPoolExecutor(2) as pool:
        put(server, "/approvals/settings", {"min_approvals": 1})
        ids = {"human": decided(server, pool, "get_pet_by_id", {"petId": "1"}, "approve", "alice")}

        def precedent_ready() -> bool:
            rows = get(server, "/approvals/precedents")["precedents"]
            return any(p["tool"] == "get_pet_by_id" and p["would_auto_approve"] for p in rows)

        wait_until(precedent_ready, timeout=20)  # the human approval's fact reached memory
        lifted = call(server, "get_pet_by_id", {"petId": "2"})
        assert lifted.status_code == 200 and lifted.json()["policy"] == "allow", lifted.text
        precedent_trace = lifted.json()["trace_id"]
        [auto] = get(server, "/approvals/decisions", trace=precedent_trace)["decisions"]
        ids["precedent"] = auto["id"]
        ids["supervisor"] = decided(server, pool, "create_pet", {"name": "Sup"}, "approve", "supervisor:sup7")
        ids["denied"] = decided(server, pool, "create_pet", {"name": "No"}, "deny", "bob")
        put(server, "/approvals/settings", {"timeout_seconds": 1})
        late = call(server, "create_pet", {"name": "Late"})
        assert late.status_code == 408, late.text
        ids["timeout"], timeout_trace = late.json()["approval_id"], late.json()["trace_id"]
        put(server, "/approvals/settings", {"timeout_seconds": 90})
        waiting = pool.submit(call, server, "create_pet", {"name": "Wait"})
        waiting_id = pending(server, "create_pet")
        try:
            report = drive(server, "decision-badges", rows=ids, pending=waiting_id, timeout_trace=timeout_trace)
        finally:
            post(server, f"/approvals/{waiting_id}/deny", {})
        assert waiting.result(timeout=30).status_code == 403

    rows = report["rows"]
    expected = {
        "human": ("approved-human", "approved by human", "ok"),
        "precedent": ("approved-precedent", "approved by precedent", "ok"),
        "supervisor": ("approved-supervisor", "approved by supervisor", "ok"),
        "denied": ("denied-human", "denied by human", "bad"),
        "timeout": ("timeout", "refused: timed out", "bad"),
    }
    for name, (key, text, tone) in expected.items():
        row = rows[name]
        assert (row["key"], row["text"]) == (key, text), (name, row)
        assert f"badge-{tone}" in row["cls"], (name, row)
    assert "allow" not in rows["timeout"]["row"].lower()
    assert rows["precedent"]["call"] == f"#/traces?trace={precedent_trace}"
    assert rows["timeout"]["call"] == f"#/traces?trace={timeout_trace}"
    assert report["filtered"] == [ids["precedent"]] and "resolver=mem7" in report["filteredUrl"]

    detail = report["detail"]
    assert (detail["status"]["key"], detail["status"]["text"]) == ("pending", "pending")
    assert report["pendingList"]["key"] == "pending"
    assert "would not auto-approve" in detail["rule"] and "not a read tool" in detail["rule"]
    past = {p["approval"].rsplit("/", 1)[-1]: p for p in detail["past"]}
    assert {past[ids[n]]["key"] for n in ("supervisor", "denied", "timeout")} == {
        "approved-supervisor",
        "denied-human",
        "timeout",
    }
    assert past[ids["timeout"]]["call"] == f"#/traces?trace={timeout_trace}"
    assert ids["human"] not in past  # another tool's decision is not a precedent of create_pet

    texts = [b["text"] for b in report["traceBadges"]]
    assert "refused: timed out" in texts and "allow" not in texts, report["traceBadges"]
    assert report["decisionLink"] == f"#/approvals/{ids['timeout']}"


# The pages of docs/console.md; "{…}" parts are filled from the data seeded below.
PAGES = {
    "overview": "#/",
    "approvals": "#/approvals",
    "approval-detail": "#/approvals/{approval}",
    "approvals-history": "#/approvals?tab=history",
    "approvals-precedents": "#/approvals?tab=precedents",
    "approvals-settings": "#/approvals?tab=settings",
    "decisions": "#/decisions",
    "agents": "#/agents",
    "agent-detail": "#/agents/claude",
    "traces": "#/traces",
    "trace-why": "#/traces?trace={trace}",
    "sessions": "#/sessions",
    "session-detail": "#/sessions/{session}",
    "otel": "#/otel",
    "policies": "#/policies",
    "policies-by-tool": "#/policies?tab=tool",
    "policies-yaml": "#/policies?tab=yaml&file=agents",
    "tools": "#/tools",
    "grants": "#/grants",
    "connections": "#/connections",
    "oauth-consent": "#/oauth/consent?request={consent}",
    "memory": "#/memory",
    "memory-search": "#/memory?tab=search&q=tortoise",
    "memory-decisions": "#/memory?tab=decisions",
    "memory-entry": "#/memory?key=pets.tortoise",
    "supervisor": "#/supervisor",
    "halts": "#/halts",
    "users": "#/users",
    "login": "#/login",
    "settings": "#/settings",
}


def test_every_page_loads_its_data_without_errors_and_is_screenshotted(
    tmp_path: Path, backend: Backend, engine_configs: str
) -> None:
    # Pinning on: with it off GET /tools/pins answers 501, which the browser logs as an error.
    with running_server(console_config(tmp_path, backend, "pin_tools: true")) as server:
        session = {"X-Session-Id": "e2e-session-1"}
        listed = [call(server, "list_pets", {"limit": i}, session) for i in range(3)]
        assert all(r.status_code == 200 for r in listed)
        assert call(server, "delete_pet", {"petId": "1"}, session).status_code == 403
        rpc(server, "memory_store", {"key": "pets.tortoise", "value": "Zeno the tortoise eats dandelions"})
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(call, server, "create_pet", {"name": "Kit"})
            approved = pending(server, "create_pet")
            r = post(server, f"/approvals/{approved}/approve", {"reasoning": "seeded approval"})
            assert r.status_code == 200 and first.result(timeout=30).status_code == 200
            waiting = pool.submit(call, server, "create_pet", {"name": "Zeno"})
            approval = pending(server, "create_pet")
            grant = post(server, "/grants", {"agent": "cursor", "tools": "get_*", "duration": "1h"})
            assert grant.status_code == 201
            # a client connected by OAuth, and another waiting for a human's consent (docs/managed-agents.md)
            with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as http:
                oauth = OAuthPlayer(http, server.url, human=dict(ADMIN))
                oauth.connect(agent="claude-web", client_name="Claude e2e")
                waiting_client = oauth.register(client_name="ChatGPT e2e")["client_id"]
                consent = oauth.consent_request(waiting_client, Pkce())
            ids = {
                "approval": approval,
                "trace": listed[-1].json()["trace_id"],
                "session": "e2e-session-1",
                "consent": consent,
            }
            pages = {name: route.format(**ids) for name, route in PAGES.items()}
            try:
                report = drive(server, "screenshots", pages=pages)
            finally:
                post(server, f"/approvals/{approval}/deny", {})
            assert waiting.result(timeout=30).status_code == 403

    shots = report["shots"]
    assert set(shots) == set(PAGES)
    for name, shot in shots.items():
        png = Path(shot["file"])
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert shot["errors"] == 0, name
    expect = {  # what each page must show of the seeded data
        "overview": "create_pet",
        "approvals": "create_pet",
        "approval-detail": "Zeno",
        "approvals-history": "seeded approval",
        "approvals-precedents": "create_pet",
        "approvals-settings": "Human approvals needed",
        "decisions": "seeded approval",
        "agents": "claude",
        "agent-detail": "create_pet",
        "traces": "delete_pet",
        "trace-why": ids["trace"],
        "sessions": "e2e-session-1",
        "session-detail": "list_pets",
        "otel": "delete_pet",
        "policies": "agents",
        "policies-by-tool": "create_pet",
        "policies-yaml": "human_approval",
        "tools": "create_pet",
        "grants": "cursor",
        "connections": "Claude e2e",
        "oauth-consent": "Connect ChatGPT e2e?",
        "memory": "pets.tortoise",
        "memory-search": "Zeno the tortoise",
        "memory-decisions": "create_pet",
        "memory-entry": "Zeno the tortoise eats dandelions",
        "supervisor": "Not configured",
        "halts": "No stop is in force",
        "users": "flux7 user add",
        "login": "the owner (admin token)",
        "settings": "Connection",
    }
    for name, text in expect.items():
        assert text in shots[name]["text"], f"{name} lacks {text!r}:\n{shots[name]['text'][:2000]}"
