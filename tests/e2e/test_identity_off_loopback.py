"""Identity off loopback (issue 13 item 5) on real `flux7 serve` processes bound to 0.0.0.0 (traffic only to
127.0.0.1): claimed agent ids and anonymous calls refused, per-agent tokens accepted as their agent, revoked
tokens refused, the published SDKs with a token as their bearer, MCP sessions bound to their opener, and the
RFC 9728 discovery a standard MCP client follows. `auth.allow_claimed_identity: true` restores the reference."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mem7 import Mem7
from mesh7 import AgentMesh
from mesh7.client import Action

from tests.support.server import REPO, Server, start_server, stop_server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.served

ADMIN = "admin-secret-for-tests"
ISSUER = "https://issuer.example"
BASE_CONFIG = """
approval: {timeout_seconds: 60, channel: queue}
supervisor: {auto_approve: false}
cli_tools:
  - {name: say, bin: /bin/echo, bare: {timeout: 5s}}
policies:
  - name: claude
    agent: claude
    rules:
      - tools: ["say.run"]
        action: allow
  - name: others
    agent: "*"
    rules:
      - tools: ["*"]
        action: deny
"""


def write(tmp: Path, auth: str, database: str) -> Path:
    """The config; `database` names the engine's PostgreSQL database ("" keeps SQLite at storage_path)."""
    cfg = tmp / "config.yaml"
    engine = f"database: {database}\n" if database else ""
    cfg.write_text(f"storage_path: {tmp}/flux7.db\n{engine}{BASE_CONFIG}auth:\n  admin_token: {ADMIN}\n{auth}")
    return cfg


@contextmanager
def serve_everywhere(cfg: Path) -> Iterator[Server]:
    server = start_server(cfg, extra=["--host", "0.0.0.0"])  # the point: a bind off loopback
    try:
        yield server
    finally:
        stop_server(server)


def startup_line(server: Server) -> str:
    def find() -> str | None:
        return next((x for x in server.log.read_text().splitlines() if "identities:" in x), None)

    return str(wait_until(find, 10, "the start-up line"))


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, module_database_url: str) -> Iterator[Server]:
    """Off loopback with the default identity settings and a JWT issuer configured (never asked in these tests:
    only agent tokens are presented)."""
    tmp = tmp_path_factory.mktemp("strict")
    jwt = f"  jwt: {{jwks_url: 'http://127.0.0.1:9/jwks', issuer: '{ISSUER}'}}\n"
    with serve_everywhere(write(tmp, jwt, module_database_url)) as s:
        yield s


def token_cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`flux7 token …` on the running server's database, as an operator would type it."""
    cfg = server.log.parent / "config.yaml"
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "token", *args, "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def issue(server: Server, agent: str) -> str:
    done = token_cli(server, "issue", agent, "--note", "test")
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("f7a_") and len(token) > 40
    return token


def decide(server: Server, authorization: str | None, tool: str = "say.run") -> httpx.Response:
    headers = {"Authorization": authorization} if authorization else {}
    return httpx.post(f"{server.url}/decide", json={"tool": tool}, headers=headers, trust_env=False, timeout=30)


def test_the_start_up_line_says_which_identities_count(strict: Server) -> None:
    line = startup_line(strict)
    assert f"identities: agent tokens yes, JWT from {ISSUER}, claimed agent ids no, anonymous no" in line
    assert "0.0.0.0" in line


def test_claims_and_anonymous_calls_are_refused_on_the_data_plane(strict: Server) -> None:
    for authorization in (None, "Bearer agent:claude", "Bearer claude"):
        r = decide(strict, authorization)
        assert r.status_code == 401 and "authentication required" in r.json()["error"], (authorization, r.text)
        tool = httpx.post(
            f"{strict.url}/tool/say.run",
            json={"args": ["hi"]},
            headers={"Authorization": authorization} if authorization else {},
            trust_env=False,
        )
        assert tool.status_code == 401
    unknown = decide(strict, "Bearer f7a_" + "x" * 43)
    assert unknown.status_code == 401 and "agent token" in unknown.json()["error"]


def test_a_token_speaks_for_its_agent_and_is_refused_once_revoked(strict: Server) -> None:
    claude, other = issue(strict, "claude"), issue(strict, "intruder")
    allowed = decide(strict, f"Bearer {claude}")
    assert allowed.status_code == 200 and allowed.json()["agent"] == "claude" and allowed.json()["action"] == "allow"
    denied = decide(strict, f"Bearer {other}")  # intruder's policy applies, not claude's
    assert denied.status_code == 403 and denied.json()["agent"] == "intruder"
    listed = json.loads(token_cli(strict, "list", "--json").stdout)
    mine = next(t for t in listed if t["prefix"] == claude[:12])
    assert mine["agent_id"] == "claude" and mine["state"] == "active" and "token" not in mine
    assert claude not in strict.log.read_text() and claude not in token_cli(strict, "list").stdout
    # revoked over REST by the admin, by the token's first characters
    admin = {"Authorization": f"Bearer {ADMIN}"}
    r = httpx.delete(f"{strict.url}/tokens/{claude[:10]}", headers=admin, trust_env=False)
    assert r.status_code == 200 and r.json()["state"] == "revoked" and r.json()["id"] == mine["id"]
    refused = decide(strict, f"Bearer {claude}")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]


def test_tokens_over_rest_are_admin_only(strict: Server) -> None:
    r = httpx.post(f"{strict.url}/tokens", json={"agent": "claude"}, trust_env=False)
    assert r.status_code == 401
    admin = {"Authorization": f"Bearer {ADMIN}"}
    fields = {"agent": "claude", "expires": "1h"}
    created = httpx.post(f"{strict.url}/tokens", json=fields, headers=admin, trust_env=False)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["token"].startswith("f7a_") and body["expires_at"] is not None and body["state"] == "active"
    assert decide(strict, f"Bearer {body['token']}").json()["agent"] == "claude"
    listed = httpx.get(f"{strict.url}/tokens", params={"agent": "claude"}, headers=admin, trust_env=False).json()
    assert body["id"] in {t["id"] for t in listed} and all("token" not in t for t in listed)
    bad = httpx.post(f"{strict.url}/tokens", json={"agent": "a b"}, headers=admin, trust_env=False)
    assert bad.status_code == 400 and "invalid agent id" in bad.json()["error"]


def test_the_published_sdks_use_a_token_as_their_bearer(strict: Server) -> None:
    token = issue(strict, "claude")
    mesh = AgentMesh(strict.url, agent="label-only", token=token)
    assert mesh.decide("say.run").action == Action.ALLOW
    called = mesh.call_tool("say.run", {"args": ["hello"]})
    assert called.action == Action.ALLOW and "hello" in json.dumps(called.result)
    claimed = AgentMesh(strict.url, agent="claude")  # `Bearer agent:claude`: refused off loopback
    assert claimed.call_tool("say.run", {"args": ["x"]}).action == Action.ERROR
    # memory: the token's agent owns what it writes, whatever agent the call names
    memory = Mem7(strict.url, token=token)
    memory.store("k-token", "v", agent="someone-else")
    assert "Agent: claude" in memory.recall(key="k-token")
    with pytest.raises(Exception, match="401"):
        Mem7(strict.url, token="").store("k-anon", "v")


def test_mcp_without_a_token_points_at_the_protected_resource_metadata(strict: Server) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    r = httpx.post(f"{strict.url}/mcp", json=init, trust_env=False)
    assert r.status_code == 401 and r.json()["error"]["code"] == -32600
    metadata_url = f"{strict.url}/.well-known/oauth-protected-resource"
    assert r.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    claim = httpx.post(f"{strict.url}/mcp", json=init, headers={"Authorization": "Bearer agent:x"}, trust_env=False)
    assert claim.status_code == 401 and 'error="invalid_token"' in claim.headers["www-authenticate"]
    for url in (metadata_url, metadata_url + "/mcp"):
        doc = httpx.get(url, trust_env=False)
        assert doc.status_code == 200 and doc.headers["content-type"].startswith("application/json")
        assert doc.json() == {
            "resource": f"{strict.url}/mcp",
            "authorization_servers": [ISSUER, strict.url],  # the identity provider first, then flux7's own
            "scopes_supported": ["mcp"],
            "bearer_methods_supported": ["header"],
            "resource_name": "flux7 mesh",
        }


async def test_an_mcp_session_is_bound_to_the_token_that_opened_it(strict: Server) -> None:
    token, other = issue(strict, "claude"), issue(strict, "intruder")
    sessions: list[str] = []

    async def remember(response: Any) -> None:
        if response.headers.get("mcp-session-id"):
            sessions.append(response.headers["mcp-session-id"])

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=30, event_hooks={"response": [remember]}
    )
    url = f"{strict.url}/mcp"
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        assert "say.run" in {t.name for t in (await client.list_tools()).tools}
        assert sessions, "the SDK opened no session"
        body = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
        base = {"Mcp-Session-Id": sessions[0], "MCP-Protocol-Version": "2025-11-25"}
        async with httpx.AsyncClient(trust_env=False, timeout=30) as raw:
            bare = await raw.post(url, json=body, headers=base)
            assert bare.status_code == 401 and "resource_metadata" in bare.headers["www-authenticate"]
            stolen = await raw.post(url, json=body, headers={**base, "Authorization": f"Bearer {other}"})
            assert stolen.status_code == 404 and stolen.json()["error"]["message"] == "Unknown session"
            ended = await raw.delete(url, headers={**base, "Authorization": f"Bearer {other}"})
            assert ended.status_code == 404
        # the opener's session still works after the attempts
        assert "say.run" in {t.name for t in (await client.list_tools()).tools}


def test_allow_claimed_identity_restores_the_reference(tmp_path: Path, database_url: str) -> None:
    with serve_everywhere(write(tmp_path, "  allow_claimed_identity: true\n", database_url)) as server:
        line = startup_line(server)
        assert "identities: agent tokens yes, JWT no, claimed agent ids yes, anonymous yes" in line
        claimed = decide(server, "Bearer agent:claude")
        assert claimed.status_code == 200 and claimed.json()["agent"] == "claude"
        assert decide(server, None).status_code == 403  # anonymous is served (and denied by the policy)
        assert AgentMesh(server.url, agent="claude").decide("say.run").action == Action.ALLOW
        # a session opened with a claim is still the claimant's alone
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
        opened = httpx.post(
            f"{server.url}/mcp", json=init, headers={"Authorization": "Bearer agent:claude"}, trust_env=False
        )
        sid = opened.headers["mcp-session-id"]
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        hijack = httpx.post(f"{server.url}/mcp", json=body, headers={"Mcp-Session-Id": sid}, trust_env=False)
        assert hijack.status_code == 404
        owner = httpx.post(
            f"{server.url}/mcp",
            json=body,
            headers={"Mcp-Session-Id": sid, "Authorization": "Bearer agent:claude"},
            trust_env=False,
        )
        assert owner.status_code == 200 and "result" in owner.json()


def test_the_admin_token_still_reads_the_catalog_decides_for_an_agent_and_reaches_memory(strict: Server) -> None:
    """The console sends the admin token to /tools, /mcp-servers and /rpc: it holds no agent identity, but it is
    no anonymous caller either."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    tools = httpx.get(f"{strict.url}/tools", headers=admin, trust_env=False)
    assert tools.status_code == 200 and "say.run" in {t["name"] for t in tools.json()}
    assert httpx.get(f"{strict.url}/mcp-servers", headers=admin, trust_env=False).status_code == 200
    assert httpx.get(f"{strict.url}/tools", trust_env=False).status_code == 401
    on_behalf = httpx.post(
        f"{strict.url}/decide", json={"tool": "say.run", "agent": "claude"}, headers=admin, trust_env=False
    )
    assert on_behalf.status_code == 200 and on_behalf.json()["agent"] == "claude"
    nobody = httpx.post(f"{strict.url}/decide", json={"tool": "say.run"}, headers=admin, trust_env=False)
    assert nobody.status_code == 401
    assert httpx.post(f"{strict.url}/tool/say.run", json={}, headers=admin, trust_env=False).status_code == 401
    assert "## k-admin" in Mem7(strict.url, token=ADMIN).store("k-admin", "v") + Mem7(strict.url, token=ADMIN).recall(
        key="k-admin"
    )
    # a claimed agent on the body is still refused without the admin token
    claimed = httpx.post(
        f"{strict.url}/decide",
        json={"tool": "say.run", "agent": "claude"},
        headers={"Authorization": "Bearer agent:claude"},
        trust_env=False,
    )
    assert claimed.status_code == 401
