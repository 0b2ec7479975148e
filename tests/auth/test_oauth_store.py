"""The OAuth stores (shared/auth/oauth_clients.py, shared/auth/oauth_connections.py) over a real database, on
either engine (`--engine=postgresql`): secrets kept only as hashes, a code and a refresh token good once, the
identity an access token gives, and `flux7 token list/revoke` on OAuth connections as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flux7.shared.auth.identity import IdentityResolver
from flux7.shared.auth.oauth_clients import ClientStore, proposed_agent_id
from flux7.shared.auth.oauth_connections import ConnectionStore, Consent
from flux7.shared.auth.oauth_requests import RequestStore
from flux7.shared.auth.redirect_uris import redirect_target, redirect_uri_problem
from flux7.shared.errors import Conflict, Unauthorized
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database

REPO = Path(__file__).resolve().parents[2]
RESOURCE = "http://127.0.0.1:9090/mcp"


def connect(db: Database, agent: str = "claude", by: str = "owner:admin-token") -> tuple[str, dict[str, str]]:
    """A registered client and a connection from one exchanged code, as the token endpoint makes them."""
    client = ClientStore(db).register(ClientStore.new_client_id(), {"redirect_uris": ["http://127.0.0.1:1/cb"]}, None)
    store = ConnectionStore(db)
    waiting = RequestStore(db).open_request(client.client_id, "http://127.0.0.1:9090", {}, agent, 60)
    consent = Consent(agent_id=agent, granted_by=by, request_id=waiting.id)
    params = {"scope": "mcp", "resource": RESOURCE, "code_challenge": "c" * 43, "code_challenge_method": "S256"}
    store.save_code("the-code", client.client_id, "http://127.0.0.1:1/cb", params, consent)
    code, _ = store.take_code("the-code", client.client_id)
    assert code is not None
    token = {"access_token": "f7o_" + "a" * 43, "refresh_token": "f7r_" + "r" * 43, "expires_in": 600}
    store.start("the-code", token, code, refresh_seconds=3600)
    return client.client_id, token


def test_tokens_and_codes_are_stored_only_as_hashes(store: Database, tmp_path: Path) -> None:
    connect(store)
    rows = [dict(r) for t in ("oauth_tokens", "oauth_codes") for r in store.query(f"SELECT * FROM {t}")]
    text = json.dumps(rows, default=str)
    assert "f7o_" not in text and "f7r_" not in text and "the-code" not in text


def test_a_code_is_taken_once_and_a_second_take_revokes_its_connection(store: Database) -> None:
    client_id, token = connect(store)
    again, revoked = ConnectionStore(store).take_code("the-code", client_id)
    assert again is None and revoked.startswith("otk_")
    assert ConnectionStore(store).authenticate(token["access_token"]) is None


def test_a_refresh_token_is_taken_once_by_its_own_client(store: Database) -> None:
    client_id, token = connect(store)
    connections = ConnectionStore(store)
    assert connections.take_refresh(token["refresh_token"], "f7c_someone-else") == (None, "")
    record, _ = connections.take_refresh(token["refresh_token"], client_id)
    assert record is not None and record.consent.agent_id == "claude"
    again, revoked = connections.take_refresh(token["refresh_token"], client_id)
    assert again is None and revoked == record.connection_id
    assert connections.get(revoked).revoked_by == "system:refresh-reuse"


def test_an_access_token_is_its_consented_agent_verified(store: Database, tmp_path: Path) -> None:
    _, token = connect(store, agent="claude-web")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("auth: {admin_token: x}\nsupervisor: {supervisor_agents: [sup*]}\n")
    identity = IdentityResolver(load_settings(cfg, env={}), oauth=ConnectionStore(store))
    caller = identity.caller(f"Bearer {token['access_token']}")
    assert caller.agent_id == "claude-web" and caller.verified and caller.user_id == ""
    with pytest.raises(Unauthorized, match="refresh token"):
        identity.caller(f"Bearer {token['refresh_token']}")
    with pytest.raises(Unauthorized):
        IdentityResolver(load_settings(cfg, env={})).caller(f"Bearer {token['access_token']}")  # OAuth off
    cfg.write_text("auth: {admin_token: x, resource_url: 'https://mesh.example.com'}\n")
    with pytest.raises(Unauthorized, match="issued for"):  # a token bound to another audience
        IdentityResolver(load_settings(cfg, env={}), oauth=ConnectionStore(store)).caller(
            f"Bearer {token['access_token']}"
        )


def test_a_decided_request_is_never_decided_again(store: Database) -> None:
    requests = RequestStore(store)
    waiting = requests.open_request("f7c_x", "http://127.0.0.1:9090", {}, "claude", 60)
    assert requests.decide_request(waiting.id, "denied", "user:ana").state() == "denied"
    with pytest.raises(Conflict, match="denied by user:ana"):
        requests.decide_request(waiting.id, "approved", "user:bob")


def test_redirect_uris_and_proposed_agent_ids() -> None:
    good = ("https://claude.ai/api/mcp/auth_callback", "http://127.0.0.1:33418/", "http://localhost:1/cb")
    apps = ("cursor://anysphere.cursor-mcp/oauth/callback", "com.example.app://oauth/cb")  # RFC 8252 section 7.1
    for uri in good + apps:
        assert redirect_uri_problem(uri) == "", uri
    for bad in ("http://example.com/cb", "vscode://x/cb", "https://x/cb#f", "https://x/ cb", "", 7, "https://"):
        assert redirect_uri_problem(bad), bad
    # An app's scheme needs a host (authlib's registration checks as much), and never names what a browser runs.
    for bad in ("com.example.app:/cb", "cursor:cb", "javascript://x/%0aalert(1)", "data://x/y", "cursor://x/cb#f"):
        assert redirect_uri_problem(bad), bad
    assert redirect_uri_problem("vscode://x/cb", ("vscode",)) == ""  # oauth.redirect_schemes names more
    assert redirect_uri_problem("cursor://x/cb", ("vscode",))  # …instead of the default
    assert redirect_uri_problem("javascript://x/y", ("javascript",))  # never, whatever the configuration
    assert redirect_target("cursor://anysphere.cursor-mcp/oauth/callback") == "cursor://anysphere.cursor-mcp"
    assert redirect_target("https://claude.ai/api/mcp/auth_callback") == "claude.ai"
    assert proposed_agent_id("Claude") == "claude" and proposed_agent_id("ChatGPT Connector") == "chatgpt-connector"
    assert proposed_agent_id("…") == "oauth-client" and proposed_agent_id("-x-") == "x"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "token", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


@pytest.mark.served
def test_the_cli_lists_and_revokes_oauth_connections(tmp_path: Path, database_url: str) -> None:
    cfg = tmp_path / "config.yaml"
    on_postgres = f"database: {database_url}\nmemory: {{enabled: false}}\n" if database_url else ""
    cfg.write_text(f"storage_path: {tmp_path}/flux7.db\n{on_postgres}")
    db = Database(database_url or tmp_path / "flux7.db")
    _, token = connect(db, agent="claude-web")
    [connection] = ConnectionStore(db).list()
    listed = cli("list", "--config", str(cfg))
    assert listed.returncode == 0, listed.stderr
    assert connection.id in listed.stdout and "claude-web" in listed.stdout and "owner:admin-token" in listed.stdout
    assert token["access_token"] not in listed.stdout
    revoked = cli("revoke", connection.id, "--config", str(cfg), "--json")
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["state"] == "revoked" and json.loads(revoked.stdout)["revoked_by"] == "cli"
    assert ConnectionStore(db).authenticate(token["access_token"]) is None
    missing = cli("revoke", "otk_ffffffffffff", "--config", str(cfg))
    assert missing.returncode == 1 and "no OAuth connection" in missing.stderr
