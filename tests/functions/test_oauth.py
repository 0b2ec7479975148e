"""flux7 as the OAuth 2.1 authorization server of /mcp, in process (functions/oauth.py, shared/auth/oauth*.py):
what a client is refused, what a human's consent grants and records, and that an OAuth token is its consented
agent on the data plane and nothing more. The SDK clients' whole flows against a real server are
tests/e2e/test_oauth_clients.py."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from authlib.oauth2 import rfc8414, rfc9207
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import make_config
from tests.support.oauth import ADMIN, REDIRECT, OAuthPlayer, Pkce, query_of
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

BASE = "http://127.0.0.1:9090"


def _client(cfg: Path) -> TestClient[Any]:
    return TestClient(create_app(Mesh(load_settings(cfg, env={}))), base_url=BASE)


@pytest.fixture
def http(tmp_path: Path, backend: Backend) -> Iterator[TestClient[Any]]:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}\noauth: {access_token_seconds: 600}")
    with _client(cfg) as c:
        yield c


@pytest.fixture
def oauth(http: TestClient[Any]) -> OAuthPlayer:
    return OAuthPlayer(http, BASE)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def mcp_list(http: TestClient[Any], token: str) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    return http.post("/mcp", json=body, headers=bearer(token))


def events(http: TestClient[Any], tool: str) -> list[dict[str, Any]]:
    return [e for e in http.get("/traces", params={"limit": 500}, headers=ADMIN).json() if e["tool"] == tool]


# --- discovery -------------------------------------------------------------------------------------------------


def test_the_metadata_documents_name_this_server_and_its_endpoints(http: TestClient[Any]) -> None:
    doc = http.get("/.well-known/oauth-authorization-server").json()
    rfc8414.AuthorizationServerMetadata(doc).validate(metadata_classes=[rfc9207.AuthorizationServerMetadata])
    assert doc["issuer"] == BASE and doc["token_endpoint"] == f"{BASE}/oauth/token"
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["registration_endpoint"] == f"{BASE}/oauth/register"
    assert doc["revocation_endpoint"] == f"{BASE}/oauth/revoke"
    resource = http.get("/.well-known/oauth-protected-resource").json()
    assert resource["resource"] == f"{BASE}/mcp" and resource["authorization_servers"] == [BASE]
    assert resource["scopes_supported"] == ["mcp"]


def test_oauth_off_removes_every_route_the_metadata_and_the_tokens(tmp_path: Path, backend: Backend) -> None:
    with _client(make_config(tmp_path, backend, "auth: {admin_token: adm1n}")) as http:
        _, tokens = OAuthPlayer(http, BASE).connect()
    off = make_config(tmp_path, backend, "auth: {admin_token: adm1n}\noauth: {enabled: false}")
    with _client(off) as http:
        assert http.get("/.well-known/oauth-authorization-server").status_code == 404
        assert http.post("/oauth/register", json={"redirect_uris": [REDIRECT]}).status_code == 404
        assert http.get("/oauth/authorize", params={"client_id": "x"}).status_code == 404
        assert http.post("/oauth/token", data={"grant_type": "x"}).status_code == 404
        assert http.get("/oauth/tokens", headers=ADMIN).status_code == 404
        assert "authorization_servers" not in http.get("/.well-known/oauth-protected-resource").json()
        assert mcp_list(http, tokens["access_token"]).status_code == 401  # issued while on, refused while off


# --- registration --------------------------------------------------------------------------------------------


def test_a_public_client_gets_an_id_and_no_secret_a_confidential_one_a_secret(oauth: OAuthPlayer) -> None:
    public = oauth.register(scope="claudeai")  # Claude registers a scope of its own: accepted, not granted
    assert public["client_id"].startswith("f7c_") and "client_secret" not in public
    assert public["grant_types"] == ["authorization_code", "refresh_token"]
    confidential = oauth.register(token_endpoint_auth_method="client_secret_post")
    assert confidential["client_secret"].startswith("f7s_") and confidential["client_secret_expires_at"] == 0


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ({"redirect_uris": ["http://app.example/cb"]}, "invalid_redirect_uri"),  # plain HTTP off loopback
        ({"redirect_uris": ["vscode://anysphere/cb"]}, "invalid_redirect_uri"),  # no app scheme named
        ({"redirect_uris": ["https://app.example/cb#frag"]}, "invalid_redirect_uri"),
        ({"redirect_uris": []}, "invalid_redirect_uri"),
        ({"redirect_uris": "https://app.example/cb"}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT], "grant_types": ["password"]}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"}, "invalid_client_metadata"),
    ],
)
def test_registration_refuses_what_it_cannot_honour(http: TestClient[Any], metadata: Any, error: str) -> None:
    r = http.post("/oauth/register", json=metadata)
    assert r.status_code == 400 and r.json()["error"] == error, r.text


def test_registration_wants_a_json_object(http: TestClient[Any]) -> None:
    for body in (b"", b"[1]", b"not json", b'"x"'):
        r = http.post("/oauth/register", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"] == "invalid_request", body


def test_registrations_from_one_address_are_limited_per_minute(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}\noauth: {registrations_per_minute: 3}")
    with _client(cfg) as http:
        oauth = OAuthPlayer(http, BASE)
        assert http.post("/oauth/register", json={"redirect_uris": []}).status_code == 400  # a refusal is not counted
        made = [oauth.register(client_name=f"c{n}")["client_id"] for n in range(3)]
        r = http.post("/oauth/register", json={"redirect_uris": [REDIRECT], "client_name": "c3"})
        assert r.status_code == 429 and r.json()["error"] == "too_many_requests", r.text
        assert "3 client registrations a minute" in r.json()["error_description"]
        assert 1 <= int(r.headers["retry-after"]) <= 61 and r.headers["cache-control"] == "no-store"
        listed = {c["client_id"] for c in http.get("/oauth/clients", headers=ADMIN).json()}
        assert listed == set(made)  # nothing stored for the refused one
        mesh = http.app.state.mesh
        # Another address has its own count; a limit of 0 is none.
        other = mesh.oauth.clients.register(
            "f7c_" + "0" * 32, {"redirect_uris": [REDIRECT]}, None, per_minute=3, registered_from="192.0.2.7"
        )
        assert other.client_id == "f7c_" + "0" * 32
        for n in range(5):
            mesh.oauth.clients.register(
                f"f7c_{n + 1:032d}", {"redirect_uris": [REDIRECT]}, None, per_minute=0, registered_from="testclient"
            )


# --- authorization -------------------------------------------------------------------------------------------


def test_authorization_waits_for_a_human_on_the_consent_page(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    client_id = oauth.register(client_name="Claude Desktop")["client_id"]
    request_id = oauth.consent_request(client_id, Pkce(), scope="claudeai")
    view = http.get(f"/oauth/requests/{request_id}", headers=ADMIN).json()
    assert view["state"] == "pending" and view["agent"] == view["proposed_agent"] == "claude-desktop"
    assert view["client"]["client_name"] == "Claude Desktop" and view["client"]["created_at"] > 0
    assert view["redirect_host"] == "127.0.0.1:5555" and view["scopes"] == ["mcp"]
    assert view["policies"] == [{"name": "agents", "agent": "*"}] and view["resource"] == f"{BASE}/mcp"
    assert http.get(f"/oauth/requests/{request_id}").status_code == 401  # the consent is the control plane's


@pytest.mark.parametrize(
    ("params", "description"),
    [
        ({"code_challenge_method": "plain"}, "plain is refused"),
        ({"code_challenge_method": None}, "S256"),
        ({"code_challenge": None, "code_challenge_method": None}, "PKCE is required"),
    ],
)
def test_authorization_without_s256_pkce_is_sent_back_refused(
    oauth: OAuthPlayer, params: dict[str, str | None], description: str
) -> None:
    client_id = oauth.register()["client_id"]
    r = oauth.authorize(client_id, Pkce(), **params)
    assert r.status_code == 302 and r.headers["location"].startswith(REDIRECT + "?")
    answer = query_of(r.headers["location"])
    assert answer["error"] == "invalid_request" and description in answer["error_description"]
    assert answer["state"] == "st4te" and answer["iss"] == BASE  # RFC 9207


def test_a_resource_of_another_server_is_refused(oauth: OAuthPlayer) -> None:
    client_id = oauth.register()["client_id"]
    r = oauth.authorize(client_id, Pkce(), resource="https://elsewhere.example/mcp")
    assert query_of(r.headers["location"])["error"] == "invalid_target"
    pkce = Pkce()
    code = oauth.code(client_id, pkce)
    r = oauth.exchange(client_id, code, pkce, resource="https://elsewhere.example/mcp")
    assert r.status_code == 400 and r.json()["error"] == "invalid_target"


def test_a_redirect_uri_that_does_not_match_exactly_is_refused_here_not_followed(oauth: OAuthPlayer) -> None:
    client_id = oauth.register()["client_id"]
    for uri in (REDIRECT + "/", REDIRECT + "?x=1", "http://127.0.0.1:5556/callback", "https://evil.example/cb"):
        r = oauth.authorize(client_id, Pkce(), redirect_uri=uri)
        assert r.status_code == 400 and r.json()["error"] == "invalid_request", uri
        assert "location" not in r.headers


def test_an_unknown_or_deleted_client_is_invalid_client_401(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    client_id, tokens = oauth.connect()
    assert http.delete(f"/oauth/clients/{client_id}", headers=ADMIN).status_code == 200
    r = oauth.refresh(client_id, tokens["refresh_token"])
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"  # a conforming client registers again
    r = oauth.authorize(client_id, Pkce())
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"
    assert mcp_list(http, tokens["access_token"]).status_code == 401  # its connections went with it


# --- consent -------------------------------------------------------------------------------------------------


def test_approval_binds_the_connection_to_the_picked_agent_and_the_human(
    oauth: OAuthPlayer, http: TestClient[Any]
) -> None:
    client_id = oauth.register()["client_id"]
    pkce = Pkce()
    request_id = oauth.consent_request(client_id, pkce)
    r = oauth.decide(request_id, "approve", agent="claude-ops")
    assert r.status_code == 200 and r.json()["agent"] == "claude-ops"
    answer = query_of(r.json()["redirect_to"])
    assert r.json()["redirect_to"].startswith(REDIRECT + "?") and answer["state"] == "st4te" and answer["iss"] == BASE
    tokens = oauth.exchange(client_id, answer["code"], pkce).json()
    assert tokens["token_type"] == "Bearer" and tokens["scope"] == "mcp" and tokens["expires_in"] == 600
    assert tokens["access_token"].startswith("f7o_") and tokens["refresh_token"].startswith("f7r_")
    [connection] = http.get("/oauth/tokens", headers=ADMIN).json()
    assert connection["agent_id"] == "claude-ops" and connection["granted_by"] == "owner:admin-token"
    assert connection["client_id"] == client_id and connection["state"] == "active"
    [event] = events(http, "mesh.oauth_approve")
    assert event["user_id"] == "owner:admin-token" and event["agent_id"] == "claude-ops"
    assert event["params"]["client_id"] == client_id and event["params"]["request"] == request_id
    again = oauth.decide(request_id, "deny")
    assert again.status_code == 409  # decided once


def test_a_denied_consent_sends_the_client_access_denied(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    client_id = oauth.register()["client_id"]
    request_id = oauth.consent_request(client_id, Pkce())
    r = oauth.decide(request_id, "deny")
    assert r.status_code == 200
    answer = query_of(r.json()["redirect_to"])
    assert r.json()["redirect_to"].startswith(REDIRECT + "?") and "code" not in answer
    assert (answer["error"], answer["state"], answer["iss"]) == ("access_denied", "st4te", BASE)
    [event] = events(http, "mesh.oauth_deny")
    assert event["user_id"] == "owner:admin-token" and event["params"]["client_id"] == client_id
    assert http.get(f"/oauth/requests/{request_id}", headers=ADMIN).json()["state"] == "denied"


def test_only_owners_and_admins_decide_and_a_named_user_is_recorded(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    names = {}
    for name, role in (("ana", "admin"), ("vic", "viewer"), ("apu", "approver")):
        r = http.post("/users", json={"name": name, "role": role}, headers=ADMIN)
        assert r.status_code == 201, r.text
        names[name] = r.json()["token"]
    client_id = oauth.register()["client_id"]
    pkce = Pkce()
    request_id = oauth.consent_request(client_id, pkce)
    for name in ("vic", "apu"):
        assert http.get(f"/oauth/requests/{request_id}", headers=bearer(names[name])).status_code == 200
        r = http.post(f"/oauth/requests/{request_id}/approve", json={}, headers=bearer(names[name]))
        assert r.status_code == 403, (name, r.text)
    r = http.post(f"/oauth/requests/{request_id}/approve", json={}, headers=bearer(names["ana"]))
    assert r.status_code == 200
    assert events(http, "mesh.oauth_approve")[0]["user_id"] == "user:ana"
    assert oauth.exchange(client_id, query_of(r.json()["redirect_to"])["code"], pkce).status_code == 200
    [connection] = http.get("/oauth/tokens", headers=ADMIN).json()
    assert connection["granted_by"] == "user:ana"


def test_a_disabled_human_takes_the_connections_they_approved_down(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    ana = http.post("/users", json={"name": "ana", "role": "admin"}, headers=ADMIN).json()["token"]
    oauth.human = bearer(ana)
    client_id, tokens = oauth.connect()
    assert mcp_list(http, tokens["access_token"]).status_code == 200
    assert http.post("/users/ana/disable", headers=ADMIN).status_code == 200
    assert mcp_list(http, tokens["access_token"]).status_code == 401
    assert oauth.refresh(client_id, tokens["refresh_token"]).json()["error"] == "invalid_grant"


def test_a_connection_never_acts_as_a_supervisor(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}\nsupervisor: {supervisor_agents: [sup7]}")
    with _client(cfg) as http:
        oauth = OAuthPlayer(http, BASE)
        client_id = oauth.register(client_name="sup7")["client_id"]
        request_id = oauth.consent_request(client_id, Pkce())
        r = oauth.decide(request_id, "approve")
        assert r.status_code == 400 and "supervisor" in r.json()["error"]
        assert http.get(f"/oauth/requests/{request_id}", headers=ADMIN).json()["state"] == "pending"


# --- tokens ----------------------------------------------------------------------------------------------------


def test_a_code_is_good_once_and_its_second_use_revokes_what_it_granted(
    oauth: OAuthPlayer, http: TestClient[Any]
) -> None:
    client_id = oauth.register()["client_id"]
    pkce = Pkce()
    code = oauth.code(client_id, pkce)
    first = oauth.exchange(client_id, code, pkce)
    assert first.status_code == 200
    second = oauth.exchange(client_id, code, pkce)
    assert second.status_code == 400 and second.json()["error"] == "invalid_grant"
    assert mcp_list(http, first.json()["access_token"]).status_code == 401
    [connection] = http.get("/oauth/tokens", headers=ADMIN).json()
    assert connection["state"] == "revoked" and connection["revoked_by"] == "system:code-reuse"


def test_the_code_wants_its_pkce_verifier(oauth: OAuthPlayer) -> None:
    client_id = oauth.register()["client_id"]
    pkce = Pkce()
    r = oauth.exchange(client_id, oauth.code(client_id, pkce), None)
    assert r.status_code == 400 and r.json() == {
        "error": "invalid_request",
        "error_description": "Missing 'code_verifier'",
    }
    r = oauth.exchange(client_id, oauth.code(client_id, pkce), Pkce())  # another verifier
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
    r = oauth.exchange(client_id, oauth.code(client_id, pkce), pkce, redirect_uri="http://127.0.0.1:5555/other")
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"


def test_a_refresh_token_rotates_and_its_reuse_revokes_the_whole_connection(
    oauth: OAuthPlayer, http: TestClient[Any]
) -> None:
    client_id, first = oauth.connect()
    second = oauth.refresh(client_id, first["refresh_token"])
    assert second.status_code == 200
    renewed = second.json()
    assert renewed["refresh_token"] != first["refresh_token"] and renewed["access_token"] != first["access_token"]
    assert mcp_list(http, renewed["access_token"]).status_code == 200
    replay = oauth.refresh(client_id, first["refresh_token"])
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    for token in (first["access_token"], renewed["access_token"]):
        assert mcp_list(http, token).status_code == 401
    assert oauth.refresh(client_id, renewed["refresh_token"]).json()["error"] == "invalid_grant"
    [connection] = http.get("/oauth/tokens", headers=ADMIN).json()
    assert connection["revoked_by"] == "system:refresh-reuse"
    assert events(http, "mesh.oauth_revoke")[0]["user_id"] == "system:refresh-reuse"


def test_another_clients_refresh_token_is_refused_and_left_alone(oauth: OAuthPlayer) -> None:
    a, tokens = oauth.connect()
    b = oauth.register()["client_id"]
    assert oauth.refresh(b, tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert oauth.refresh(a, tokens["refresh_token"]).status_code == 200


def test_a_confidential_client_authenticates_with_its_secret(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    client = oauth.register(token_endpoint_auth_method="client_secret_basic")
    pkce = Pkce()
    code = oauth.code(client["client_id"], pkce)
    wrong = base64.b64encode(f"{client['client_id']}:nope".encode()).decode()
    r = oauth.exchange(client["client_id"], code, pkce, client_secret="")
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"
    basic = base64.b64encode(f"{client['client_id']}:{client['client_secret']}".encode()).decode()
    form = {"grant_type": "authorization_code", "code": oauth.code(client["client_id"], pkce), "redirect_uri": REDIRECT}
    r = http.post(
        "/oauth/token", data={**form, "code_verifier": pkce.verifier}, headers={"Authorization": f"Basic {wrong}"}
    )
    assert r.status_code == 401
    code = oauth.code(client["client_id"], pkce)
    r = http.post(
        "/oauth/token",
        data={**form, "code": code, "code_verifier": pkce.verifier},
        headers={"Authorization": f"Basic {basic}"},
    )
    assert r.status_code == 200 and r.json()["access_token"].startswith("f7o_")


def test_the_token_endpoint_wants_a_form(http: TestClient[Any]) -> None:
    r = http.post("/oauth/token", json={"grant_type": "authorization_code"})
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"
    r = http.post("/oauth/token", data={"grant_type": "password", "username": "x"})
    assert r.status_code == 400 and r.json()["error"] == "unsupported_grant_type"


# --- the data plane ----------------------------------------------------------------------------------------------


def test_an_oauth_token_is_its_agent_on_the_data_plane_and_traced_so(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    _, tokens = oauth.connect(agent="claude-web")
    r = http.post("/tool/list_pets", json={"params": {}}, headers=bearer(tokens["access_token"]))
    assert r.status_code == 200, r.text
    r = http.post(
        "/decide", json={"tool": "list_pets", "agent": "someone-else"}, headers=bearer(tokens["access_token"])
    )
    assert r.status_code == 403  # no impersonation: the token is claude-web
    traced = http.get("/traces", params={"agent": "claude-web"}, headers=ADMIN).json()
    assert sorted(t["tool"] for t in traced) == ["list_pets", "mesh.oauth_approve"]
    r = http.post("/tool/list_pets", json={"params": {}}, headers=bearer(tokens["refresh_token"]))
    assert r.status_code == 401  # a refresh token is not a bearer
    assert http.get("/oauth/tokens", headers=ADMIN).json()[0]["last_used_at"] is not None


def test_a_revoked_or_expired_token_is_401_with_the_challenge_that_makes_clients_refresh(
    tmp_path: Path, backend: Backend
) -> None:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}\noauth: {access_token_seconds: 1}")
    with _client(cfg) as http:
        oauth = OAuthPlayer(http, BASE)
        client_id, tokens = oauth.connect()
        assert mcp_list(http, tokens["access_token"]).status_code == 200
        wait_until(lambda: mcp_list(http, tokens["access_token"]).status_code == 401, 10, "the token to expire")
        r = mcp_list(http, tokens["access_token"])
        assert r.headers["www-authenticate"] == (
            f'Bearer error="invalid_token", resource_metadata="{BASE}/.well-known/oauth-protected-resource"'
        )
        renewed = oauth.refresh(client_id, tokens["refresh_token"]).json()
        assert mcp_list(http, renewed["access_token"]).status_code == 200
        connection = http.get("/oauth/tokens", headers=ADMIN).json()[0]["id"]
        r = http.delete(f"/oauth/tokens/{connection}", headers=ADMIN)
        assert r.status_code == 200 and r.json()["state"] == "revoked" and r.json()["revoked_by"] == "owner:admin-token"
        assert mcp_list(http, renewed["access_token"]).status_code == 401
        assert oauth.refresh(client_id, renewed["refresh_token"]).json()["error"] == "invalid_grant"
        [event] = events(http, "mesh.oauth_revoke")
        assert event["user_id"] == "owner:admin-token" and event["params"]["id"] == connection


def test_a_client_revokes_its_own_connection_and_no_one_elses(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    a, tokens = oauth.connect()
    b = oauth.register()["client_id"]
    r = http.post("/oauth/revoke", data={"token": tokens["access_token"], "client_id": b})
    assert r.status_code == 400 and mcp_list(http, tokens["access_token"]).status_code == 200
    unknown = http.post("/oauth/revoke", data={"token": "f7o_unknown", "client_id": a})
    assert unknown.status_code == 200  # RFC 7009: nothing to say about a token we do not know
    r = http.post("/oauth/revoke", data={"token": tokens["refresh_token"], "client_id": a})
    assert r.status_code == 200
    assert mcp_list(http, tokens["access_token"]).status_code == 401
    assert http.get("/oauth/tokens", headers=ADMIN).json()[0]["revoked_by"] == f"oauth-client:{a}"


def test_a_page_elsewhere_may_not_consent_but_clients_reach_the_token_endpoint(
    oauth: OAuthPlayer, http: TestClient[Any]
) -> None:
    hostile = {**ADMIN, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    client_id = oauth.register()["client_id"]
    pkce = Pkce()
    request_id = oauth.consent_request(client_id, pkce)
    assert http.post(f"/oauth/requests/{request_id}/approve", json={}, headers=hostile).status_code == 403
    code = oauth.code(client_id, pkce)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "client_id": client_id}
    browser = {"Origin": "https://claude.ai", "Sec-Fetch-Site": "cross-site"}
    r = http.post("/oauth/token", data={**form, "code_verifier": pkce.verifier}, headers=browser)
    assert r.status_code == 200, r.text


def test_connections_expire_when_their_refresh_token_does(tmp_path: Path, backend: Backend) -> None:
    extra = "auth: {admin_token: adm1n}\noauth: {access_token_seconds: 1, refresh_token_seconds: 1}"
    with _client(make_config(tmp_path, backend, extra)) as http:
        oauth = OAuthPlayer(http, BASE)
        client_id, tokens = oauth.connect()
        deadline = http.get("/oauth/tokens", headers=ADMIN).json()[0]["refresh_expires_at"]
        wait_until(lambda: time.time() > deadline, 10, "the refresh token to expire")
        assert http.get("/oauth/tokens", headers=ADMIN).json()[0]["state"] == "expired"
        assert oauth.refresh(client_id, tokens["refresh_token"]).json()["error"] == "invalid_grant"


def test_cursor_registers_its_own_scheme_and_gets_its_code_there(oauth: OAuthPlayer, http: TestClient[Any]) -> None:
    """Cursor's registration names three redirect URIs, one on its own scheme (RFC 8252 section 7.1): all are
    accepted, the consent page names the app, and the code goes to the app's URI, still bound to PKCE."""
    app = "cursor://anysphere.cursor-mcp/oauth/callback"
    uris = [app, "https://www.cursor.com/agents/mcp/oauth/callback", "http://localhost:8787/callback"]
    client = oauth.register(client_name="Cursor", redirect_uris=uris)
    assert client["redirect_uris"] == uris
    pkce = Pkce()
    request_id = oauth.consent_request(client["client_id"], pkce, redirect_uri=app)
    shown = http.get(f"/oauth/requests/{request_id}", headers=ADMIN).json()
    assert shown["redirect_host"] == "cursor://anysphere.cursor-mcp" and shown["redirect_uri"] == app
    assert "cursor://anysphere.cursor-mcp" in shown["client"]["redirect_hosts"]
    decided = oauth.decide(request_id, "approve", agent="cursor-dev").json()
    assert decided["redirect_to"].startswith(app + "?")
    answer = query_of(decided["redirect_to"])
    assert answer["iss"] == BASE and answer["state"] == "st4te"
    tokens = oauth.exchange(client["client_id"], answer["code"], pkce, redirect_uri=app)
    assert tokens.status_code == 200 and tokens.json()["access_token"].startswith("f7o_"), tokens.text
    # Another app that claimed cursor:// on the machine has the code, not the verifier.
    request_id = oauth.consent_request(client["client_id"], Pkce(), redirect_uri=app)
    stolen = query_of(oauth.decide(request_id, "approve", agent="cursor-dev").json()["redirect_to"])["code"]
    refused = oauth.exchange(client["client_id"], stolen, Pkce(), redirect_uri=app)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant", refused.text


@pytest.mark.parametrize(
    "uris",
    [["javascript://x/%0aalert(1)"], ["vscode://x/cb"], ["com.example.app:/cb"], [REDIRECT, "data://x/y"]],
)
def test_a_scheme_that_is_no_apps_own_is_refused_at_registration(http: TestClient[Any], uris: list[str]) -> None:
    r = http.post(
        "/oauth/register", json={"client_name": "x", "redirect_uris": uris, "token_endpoint_auth_method": "none"}
    )
    assert r.status_code == 400 and r.json()["error"] == "invalid_redirect_uri", r.text
    assert "oauth.redirect_schemes" in r.json()["error_description"]
