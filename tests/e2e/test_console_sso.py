"""Single sign-on, end to end: a real OpenID Connect provider (oidc-provider-mock, its own process on loopback), a
real `flux7 serve` whose `auth.oidc` points at it, and Debian's Chromium signing people in
(console-spa/e2e/sso.e2e.mjs). The provider's users get their claims from this test (`PUT /users/<sub>`): their
`groups` map to flux7 roles through `auth.oidc.roles`, an approver's scope included.

alice approves a call after reading its arguments and its diff, gives the first of the two approvals a four-eyes
call needs, and denies a third with a reason; the trace, the decision fact in memory, `GET /approvals/{id}` and the
console all name `user:alice`, and the denied REST caller gets her reason verbatim. bob (a viewer) and carol (an
approver of other tools) are refused the four-eyes call (403) and see it as not theirs; dave gives the second
approval and the call runs; eve, whom no role maps, is refused with a page that says why.

Needs `apt-get install -y chromium` and `cd console-spa && npm ci` (tests/e2e/test_console.py checks both and
fails, never skips, when they are missing)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.e2e.test_console import CONSOLE, browser_installed  # noqa: F401 - the fixture fails without a browser
from tests.notify.smtp import Mailbox, smtp_server
from tests.support.http import free_port, wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.server import Server, running_server
from tests.upstreams.servers.http_backend import Backend

SCRIPT = CONSOLE / "e2e" / "sso.e2e.mjs"
TOKEN = "e2e-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
AGENT = {"Authorization": "Bearer agent:claude"}

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["delete_pet"]
    action: human_approval
    approvals: 2
  - tools: ["create_pet", "put_notes_noteId"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""

# What each person's provider account says; `groups` map to roles in the config below.
PEOPLE = {
    "alice": ["staff", "pets-approvers"],
    "bob": ["staff", "flux7-viewers"],
    "carol": ["staff", "notes-approvers"],
    "dave": ["pets-approvers"],
    "eve": ["contractors"],
}

DIFF = "--- a/pets.txt\n+++ b/pets.txt\n@@ -1,2 +1,2 @@\n Kit\n-Rex\n+Zeno\n"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[str]:
    """oidc-provider-mock in its own process on loopback, with every person's claims set."""
    port = free_port()
    log = tmp_path / "provider.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), "--host", "127.0.0.1"],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the provider exited {proc.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(f"{url}/.well-known/openid-configuration", timeout=1, trust_env=False).is_success
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, timeout=60, what="the OIDC provider")
        for sub, groups in PEOPLE.items():
            claims = {"preferred_username": sub, "email": f"{sub}@example.com", "groups": groups}
            assert httpx.put(f"{url}/users/{sub}", json=claims, trust_env=False).status_code == 204
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    """An SMTP server on loopback; a test that asks for it gets a server that mails dave its approvals."""
    with smtp_server() as box:
        yield box


@pytest.fixture
def server(
    tmp_path: Path, backend: Backend, provider: str, engine_configs: str, request: pytest.FixtureRequest
) -> Iterator[Server]:
    port = free_port()
    mail = ""
    if "mailbox" in request.fixturenames:
        box: Mailbox = request.getfixturevalue("mailbox")
        mail = (
            "notify:\n"
            f"  public_url: http://127.0.0.1:{port}\n"
            f"  email: {{smtp_host: 127.0.0.1, smtp_port: {box.port}, starttls: false, from: flux7@example.com,"
            " to: [dave@example.com]}\n"
        )
    auth = (
        "auth:\n"
        f"  admin_token: {TOKEN}\n"
        "  oidc:\n"
        f"    issuer: {provider}\n"
        "    client_id: flux7-console\n"
        "    client_secret: e2e-secret\n"
        "    roles:\n"
        "      flux7-viewers: viewer\n"
        "      pets-approvers: {role: approver, approve_tools: ['*pet*']}\n"
        "      notes-approvers: {role: approver, approve_tools: ['put_notes_*']}\n"
    )
    cfg = pets_mesh_config(
        tmp_path,
        backend,
        POLICY,
        approval_timeout=120,
        admin_token=None,
        memory="{enabled: true, hybrid: false}",
        extra=auth + mail,
    )
    with running_server(cfg, port=port) as s:
        yield s


def drive(server: Server, scenario: str, **params: Any) -> dict[str, Any]:
    proc = subprocess.run(
        ["node", str(SCRIPT), scenario, "--base", server.url, "--params", json.dumps(params)],
        capture_output=True,
        text=True,
        cwd=CONSOLE,
        timeout=180,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{scenario}: no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    shot = f"console-spa/screenshots/e2e/failed-sso-{scenario}.png"
    assert proc.returncode == 0 and report["ok"], (
        f"{scenario} failed: {report.get('error')}\n{proc.stderr[-3000:]}\n({shot})"
    )
    return report


def sign_in(server: Server, sub: str, next_route: str | None = None) -> tuple[str, dict[str, str]]:
    """`sub` signed in through the provider by a plain HTTP client, as a browser would (from a console page that
    named itself in `next`): where the sign-in lands, and the session cookie."""
    with httpx.Client(base_url=server.url, trust_env=False) as client:
        started = client.get("/login/oidc", params={"next": next_route} if next_route is not None else None)
        assert started.status_code == 302, started.text
        back = httpx.post(started.headers["location"], data={"sub": sub}, trust_env=False)
        assert back.status_code == 302, back.text
        done = client.get(back.headers["location"])
        assert done.status_code == 302, done.text
        return done.headers["location"], {"flux7_session": client.cookies["flux7_session"]}


def session_of(server: Server, sub: str) -> dict[str, str]:
    landed, cookies = sign_in(server, sub)
    assert landed == "/console/"
    return cookies


def get(server: Server, path: str, **query: Any) -> Any:
    r = httpx.get(f"{server.url}{path}", params=query, headers=ADMIN, timeout=10, trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()


def pending(server: Server, tool: str, seen: set[str]) -> str:
    """The id of a new call of `tool` waiting for approval."""
    found: list[str] = []

    def new() -> bool:
        found[:] = [a["id"] for a in get(server, "/approvals", tool=tool) if a["id"] not in seen]
        return bool(found)

    wait_until(new, timeout=20, what=f"a pending {tool}")
    seen.add(found[0])
    return found[0]


def recall(server: Server, key: str) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_recall", "arguments": {"key": key}},
    }
    r = httpx.post(f"{server.url}/rpc", json=body, headers=ADMIN, timeout=10, trust_env=False)
    assert r.status_code == 200, r.text
    return str(r.json()["result"]["content"][0]["text"])


def test_people_sign_in_through_the_provider_and_each_decides_only_what_their_role_allows(server: Server) -> None:
    post = lambda path, body, headers: httpx.post(  # noqa: E731
        f"{server.url}{path}", json=body, headers=headers, timeout=150, trust_env=False
    )
    seen: set[str] = set()
    with ThreadPoolExecutor(3) as pool:
        decide = {"tool": "create_pet", "arguments": {"name": "Zeno"}, "wait": True}
        decide["preview"] = {"kind": "diff", "path": "pets.txt", "diff": DIFF}
        decided: Future[httpx.Response] = pool.submit(post, "/decide", decide, AGENT)
        with_diff = pending(server, "create_pet", seen)
        four_eyes: Future[httpx.Response] = pool.submit(post, "/tool/delete_pet", {"params": {"petId": "1"}}, AGENT)
        both = pending(server, "delete_pet", seen)
        refused: Future[httpx.Response] = pool.submit(post, "/tool/create_pet", {"params": {"name": "Rex"}}, AGENT)
        to_deny = pending(server, "create_pet", seen)
        reason = "no new pets before the audit — ask Ops"
        try:
            alice = drive(server, "alice", approve=with_diff, fourEyes=both, deny=to_deny, reason=reason)

            # alice's approval of the call with a diff: the caller, the approval, the trace, memory all say so.
            answer = decided.result(timeout=30)
            assert answer.status_code == 200 and answer.json()["action"] == "allow", answer.text
            approval = get(server, f"/approvals/{with_diff}")
            assert approval["status"] == "approved" and approval["resolved_by"] == "user:alice"
            assert approval["resolver_kind"] == "human"
            [traced] = get(server, "/traces", trace=answer.json()["trace_id"])
            assert traced["approved_by"] == "user:alice" and traced["agent_id"] == "claude"
            fact = recall(server, f"decision.create_pet.{with_diff}")
            assert "approved by user:alice" in fact, fact
            events = get(server, "/traces", tool="mesh.approval")
            assert any(e["user_id"] == "user:alice" for e in events), events

            # The deny's reason reaches the REST caller word for word.
            denied = refused.result(timeout=30)
            assert denied.status_code == 403, denied.text
            assert denied.json()["error"] == f"approval denied by user:alice: {reason}"

            # Four eyes: one approval so far, and alice may not give the second.
            half = get(server, f"/approvals/{both}")
            assert half["status"] == "pending" and half["required_approvals"] == 2
            assert [v["actor"] for v in half["approvals"]] == ["user:alice"]
            assert not four_eyes.done()

            # bob (viewer) and carol (approver of notes) may not decide it; carol sees it as not hers.
            bob, carol, dave = (session_of(server, who) for who in ("bob", "carol", "dave"))
            for cookies in (bob, carol):
                r = httpx.post(f"{server.url}/approvals/{both}/approve", cookies=cookies, trust_env=False)
                assert r.status_code == 403, r.text
            assert (
                "viewer"
                in httpx.post(f"{server.url}/approvals/{both}/approve", cookies=bob, trust_env=False).json()["error"]
            )
            as_carol = httpx.get(f"{server.url}/approvals", cookies=carol, trust_env=False).json()
            assert [a["actionable"] for a in as_carol if a["id"] == both] == [False]
            others = drive(server, "others", pending=both, decided=with_diff)

            # dave gives the second approval: the call runs.
            second = httpx.post(f"{server.url}/approvals/{both}/approve", cookies=dave, trust_env=False)
            assert second.status_code == 200 and second.json()["status"] == "approved", second.text
            ran = four_eyes.result(timeout=30)
            assert ran.status_code == 200, ran.text
        finally:
            for left in get(server, "/approvals"):
                httpx.post(f"{server.url}/approvals/{left['id']}/deny", headers=ADMIN, json={}, trust_env=False)

    # What alice saw.
    assert alice["header"] == "alice approver Log out"
    assert alice["blind"] is True and alice["summary"] == "Arguments (1) and the diff"
    assert alice["diff"]["caption"] == "pets.txt +1 −1"
    assert alice["diff"]["added"] == ["added: +Zeno"] and alice["diff"]["removed"] == ["removed: -Rex"]
    assert alice["diff"]["addedColour"] not in ("rgba(0, 0, 0, 0)", "transparent")
    assert "Zeno" in alice["args"]
    assert alice["fourEyes"]["before"] == "0 of 2 approvals"
    assert alice["fourEyes"]["after"] == "1 of 2 approvals (user:alice)"
    assert alice["fourEyes"]["mine"] == "You approved it; it waits for someone else."
    assert alice["phone"] == {"args": "name Rex", "approve": True}
    assert "by user:alice" in alice["actors"]
    assert alice["agents"] == ["claude"]  # operators are never listed as agents

    # What bob, carol and eve saw.
    assert others["bobHeader"] == "bob viewer Log out"
    assert others["bob"]["buttons"] == 0 and "Viewers read; approvers decide." in others["bob"]["row"]
    assert "1 of 2 approvals (user:alice)" in others["bob"]["row"]
    assert others["bob"]["resolvedBy"].startswith("user:alice")
    assert others["bob"]["grantForm"] == 0 and others["bob"]["stopButton"] == 0
    assert others["carolHeader"] == "carol approver Log out"
    assert others["carol"]["buttons"] == 0 and "Not yours: outside your scope." in others["carol"]["row"]
    assert others["eve"]["url"].startswith(f"{server.url}/login/oidc/callback")
    assert "eve has no flux7 role" in others["eve"]["text"] and "contractors" in others["eve"]["text"]


def test_a_sign_in_goes_back_to_the_page_that_asked_for_it_and_nowhere_else(server: Server, mailbox: Mailbox) -> None:
    """dave opens the approval email in Chromium and follows its Approve link while signed out: he signs in
    through the provider, lands back on that approval with the link's decision pre-selected, and confirms it. Over
    plain HTTP, the route to come back to survives the provider's round trip, and one that could leave the console
    is dropped."""
    post = lambda: httpx.post(  # noqa: E731
        f"{server.url}/tool/create_pet", json={"params": {"name": "Ivy"}}, headers=AGENT, timeout=150, trust_env=False
    )
    with ThreadPoolExecutor(1) as pool:
        call: Future[httpx.Response] = pool.submit(post)
        approval = pending(server, "create_pet", set())
        try:
            mail = mailbox.to("dave@example.com")[0]
            assert mail["X-Flux7-Approval"] == approval
            html = mail.get_body(("html",))
            assert html is not None
            seen = drive(server, "emailLink", approval=approval, email=html.get_content())
            ran = call.result(timeout=30)
        finally:
            if not call.done():
                httpx.post(f"{server.url}/approvals/{approval}/deny", headers=ADMIN, json={}, trust_env=False)
    assert ran.status_code == 200, ran.text
    route = f"/approvals/{approval}?decision=approve"
    assert "create_pet" in seen["email"] and "Ivy" in seen["email"], seen["email"]
    assert seen["link"].startswith(f"{server.url}/integrations/email/")
    assert seen["loginHash"] == "#/login?" + urlencode({"next": route})
    assert seen["landed"] == f"#{route}"
    assert seen["header"] == "dave approver Log out" and seen["focused"] == "Approve"
    assert get(server, f"/approvals/{approval}")["resolved_by"] == "user:dave"

    assert sign_in(server, "dave", "/oauth/consent?request=r1")[0] == "/console/#/oauth/consent?request=r1"
    for elsewhere in ("//evil.example/x", "https://evil.example", "/\\evil.example", "/login?next=/x", "a"):
        assert sign_in(server, "dave", elsewhere)[0] == "/console/", elsewhere
