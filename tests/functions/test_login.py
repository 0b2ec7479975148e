"""Console logins in process: single sign-on against a real OpenID Connect provider (oidc-provider-mock, on a
loopback thread) through the routes' own authlib client, personal-token logins, logout, and every refusal."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from litestar.testing import TestClient
from oidc_provider_mock import run_server_in_thread

from flux7.functions.app import create_app
from flux7.shared.auth.sso import LoginRefused, identity_from_claims
from flux7.shared.auth.users import SESSION_COOKIE
from flux7.shared.errors import ConfigError
from flux7.shared.mesh import Mesh
from flux7.shared.settings import OidcRole, OidcSettings, load_settings
from tests.functions.conftest import make_config
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}
CALLBACK = "/login/oidc/callback"


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    with run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"


def oidc_block(issuer: str, extra: str = "") -> str:
    return (
        "auth:\n  admin_token: adm1n\n  oidc:\n"
        f"    issuer: {issuer}\n    client_id: flux7-console\n    client_secret: s3cret\n"
        "    roles:\n"
        "      flux7-admins: admin\n"
        "      flux7-viewers: viewer\n"
        "      pets-approvers: {role: approver, approve_tools: ['*pet*']}\n" + extra
    )


@pytest.fixture
def client(tmp_path: Path, backend: Backend, provider: str) -> Iterator[TestClient[Any]]:
    mesh = Mesh(load_settings(make_config(tmp_path, backend, oidc_block(provider)), env={}))
    with TestClient(create_app(mesh)) as c:
        yield c


def set_claims(provider: str, sub: str, claims: dict[str, Any]) -> None:
    r = httpx.put(f"{provider}/users/{sub}", json=claims, trust_env=False)
    assert r.status_code == 204, r.text


def at_provider(location: str, sub: str, tamper: dict[str, str] | None = None) -> dict[str, str]:
    """What a person does at the provider's form: signs in as `sub`. Returns the redirect's query for our
    callback. `tamper` changes parameters of the authorization request first (as an attacker in between would)."""
    parts = urlsplit(location)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update(tamper or {})
    url = urlunsplit(parts._replace(query=urlencode(query)))
    form = httpx.get(url, trust_env=False)
    assert form.status_code == 200 and "Authorize" in form.text, form.text
    back = httpx.post(url, data={"sub": sub}, trust_env=False)
    assert back.status_code == 302, back.text
    assert back.headers["location"].split("?")[0].endswith(CALLBACK)
    return {k: v[0] for k, v in parse_qs(urlsplit(back.headers["location"]).query).items()}


def begin(client: TestClient[Any]) -> tuple[str, httpx.Response]:
    started = client.get("/login/oidc", follow_redirects=False)
    assert started.status_code == 302, started.text
    return started.headers["location"], started


def sign_in(client: TestClient[Any], provider: str, sub: str, claims: dict[str, Any], **headers: str) -> httpx.Response:
    set_claims(provider, sub, claims)
    location, _ = begin(client)
    answer = at_provider(location, sub)
    return client.get(CALLBACK, params=answer, headers=headers, follow_redirects=False)


ALICE = {"preferred_username": "alice", "email": "alice@example.com", "groups": ["staff", "pets-approvers"]}


def set_cookie(response: httpx.Response, name: str) -> str:
    [header] = [h for h in response.headers.get_list("set-cookie") if h.startswith(f"{name}=")]
    return header


def test_the_redirect_to_the_provider_carries_state_nonce_and_an_s256_code_challenge(
    client: TestClient[Any], provider: str
) -> None:
    location, started = begin(client)
    assert location.startswith(f"{provider}/oauth2/authorize?")
    query = parse_qs(urlsplit(location).query)
    assert query["client_id"] == ["flux7-console"] and query["response_type"] == ["code"]
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["scope"] == ["openid email profile"]
    assert query["nonce"][0] and query["state"][0]
    assert query["redirect_uri"] == [f"http://testserver.local{CALLBACK}"]
    state = set_cookie(started, "flux7_login_state")
    assert f"flux7_login_state={query['state'][0]}" in state
    assert "HttpOnly" in state and "SameSite=lax" in state and f"Path={CALLBACK}" in state and "Max-Age=600" in state


def test_a_single_sign_on_opens_an_httponly_strict_expiring_session_with_the_mapped_role_and_scope(
    client: TestClient[Any], provider: str
) -> None:
    done = sign_in(client, provider, "alice", ALICE)
    assert done.status_code == 302 and done.headers["location"] == "/console/", done.text
    cookie = set_cookie(done, SESSION_COOKIE)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Max-Age=43200" in cookie and "Secure" not in cookie  # 12 hours; served over plain http
    me = client.get("/me")
    assert me.status_code == 200, me.text
    assert me.json() == {
        "actor": "user:alice",
        "kind": "user",
        "name": "alice",
        "role": "approver",
        "approve_tools": ["*pet*"],
        "approve_agents": [],
    }
    assert client.get("/login").json()["who"]["actor"] == "user:alice"
    [user] = [u for u in client.get("/users", headers=ADMIN).json() if u["name"] == "alice"]
    assert user["source"] == "oidc" and user["email"] == "alice@example.com"
    logins = client.get("/traces", params={"tool": "mesh.login"}, headers=ADMIN).json()
    assert [(t["user_id"], t["agent_id"], t["params"]["method"]) for t in logins] == [("user:alice", "", "oidc")]


def test_the_session_cookie_is_secure_behind_an_https_proxy(client: TestClient[Any], provider: str) -> None:
    done = sign_in(client, provider, "alice", ALICE, **{"X-Forwarded-Proto": "https"})
    assert done.status_code == 302, done.text
    assert "Secure" in set_cookie(done, SESSION_COOKIE)


def test_logout_deletes_the_session_on_the_server_and_clears_the_cookie(client: TestClient[Any], provider: str) -> None:
    assert sign_in(client, provider, "alice", ALICE).status_code == 302
    session = client.cookies[SESSION_COOKIE]
    out = client.post("/logout")
    assert out.status_code == 204
    assert re.search(r"Max-Age=0", set_cookie(out, SESSION_COOKIE))
    # The old value, sent again by hand, opens nothing: the session is gone on the server, not only the cookie.
    client.cookies.clear()
    assert client.get("/me", cookies={SESSION_COOKIE: session}).status_code == 401
    assert client.get("/login", cookies={SESSION_COOKIE: session}).json()["who"] is None


def test_a_tampered_or_foreign_state_is_refused_and_opens_no_session(client: TestClient[Any], provider: str) -> None:
    set_claims(provider, "alice", ALICE)
    location, _ = begin(client)
    answer = at_provider(location, "alice")
    forged = client.get(CALLBACK, params={**answer, "state": answer["state"][:-2] + "xx"}, follow_redirects=False)
    assert forged.status_code == 400 and "text/html" in forged.headers["content-type"]
    assert "does not match this browser" in forged.text and "Sign-in failed" in forged.text
    # Another browser (without this one's state cookie) cannot finish this browser's login either.
    client.cookies.clear()
    foreign = client.get(CALLBACK, params=answer, follow_redirects=False)
    assert foreign.status_code == 400 and SESSION_COOKIE not in foreign.headers.get("set-cookie", "")
    assert client.get("/me").status_code == 401


def test_a_state_is_good_once(client: TestClient[Any], provider: str) -> None:
    set_claims(provider, "alice", ALICE)
    location, _ = begin(client)
    answer = at_provider(location, "alice")
    state_cookie = client.cookies["flux7_login_state"]
    assert client.get(CALLBACK, params=answer, follow_redirects=False).status_code == 302
    client.cookies.clear()
    again = client.get(CALLBACK, params=answer, cookies={"flux7_login_state": state_cookie}, follow_redirects=False)
    assert again.status_code == 400 and "used already" in again.text


def test_an_id_token_with_another_nonce_is_refused(client: TestClient[Any], provider: str) -> None:
    set_claims(provider, "alice", ALICE)
    location, _ = begin(client)
    answer = at_provider(location, "alice", tamper={"nonce": "a-nonce-this-login-never-made"})
    refused = client.get(CALLBACK, params=answer, follow_redirects=False)
    assert refused.status_code == 400, refused.text
    assert "ID token does not verify" in refused.text and "nonce" in refused.text
    assert SESSION_COOKIE not in client.cookies
    assert client.get("/me").status_code == 401


def test_the_providers_refusal_is_shown_and_opens_nothing(client: TestClient[Any], provider: str) -> None:
    location, _ = begin(client)
    state = parse_qs(urlsplit(location).query)["state"][0]
    refused = client.get(CALLBACK, params={"state": state, "error": "access_denied"}, follow_redirects=False)
    assert refused.status_code == 400 and "the identity provider refused: access_denied" in refused.text


def test_a_code_the_provider_never_issued_is_refused(client: TestClient[Any]) -> None:
    location, _ = begin(client)
    state = parse_qs(urlsplit(location).query)["state"][0]
    refused = client.get(CALLBACK, params={"state": state, "code": "made-up"}, follow_redirects=False)
    assert refused.status_code == 400 and "the identity provider refused the code: invalid_grant" in refused.text


def test_a_user_whose_claims_map_to_no_role_is_refused_with_a_page_that_says_why(
    client: TestClient[Any], provider: str
) -> None:
    refused = sign_in(client, provider, "eve", {"preferred_username": "eve", "groups": ["contractors"]})
    assert refused.status_code == 403 and "text/html" in refused.headers["content-type"]
    assert "Sign-in refused" in refused.text
    assert "eve has no flux7 role: their &#x27;groups&#x27; claim (contractors) maps to none" in refused.text
    assert SESSION_COOKIE not in client.cookies
    assert all(u["name"] != "eve" for u in client.get("/users", headers=ADMIN).json())


def test_a_disabled_users_session_stops_and_their_next_sign_in_is_refused(
    client: TestClient[Any], provider: str
) -> None:
    assert sign_in(client, provider, "alice", ALICE).status_code == 302
    assert client.get("/me").status_code == 200
    assert client.post("/users/alice/disable", headers=ADMIN).status_code == 200
    assert client.get("/me").status_code == 401
    again = sign_in(client, provider, "alice", ALICE)
    assert again.status_code == 403 and "user &#x27;alice&#x27; is disabled" in again.text


def test_a_local_user_keeps_the_role_the_operator_gave_whatever_the_claims_say(
    client: TestClient[Any], provider: str
) -> None:
    added = client.post("/users", json={"name": "alice", "role": "viewer"}, headers=ADMIN)
    assert added.status_code == 201, added.text
    assert sign_in(client, provider, "alice", ALICE).status_code == 302
    assert client.get("/me").json()["role"] == "viewer"


def test_a_personal_token_logs_in_to_the_same_kind_of_session(client: TestClient[Any]) -> None:
    token = client.post("/users", json={"name": "bob", "role": "viewer"}, headers=ADMIN).json()["token"]
    assert client.post("/login", json={"token": "f7u_not-a-real-one"}).status_code == 401
    assert client.post("/login", json={"token": "adm1n"}).status_code == 401  # the admin token is no user's
    assert client.post("/login", json={}).status_code == 400
    done = client.post("/login", json={"token": token})
    assert done.status_code == 200 and done.json()["actor"] == "user:bob" and done.json()["role"] == "viewer"
    cookie = set_cookie(done, SESSION_COOKIE)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=43200" in cookie
    assert client.get("/me").json()["actor"] == "user:bob"


def test_the_login_posts_are_same_origin_only(client: TestClient[Any]) -> None:
    token = client.post("/users", json={"name": "bob", "role": "viewer"}, headers=ADMIN).json()["token"]
    evil = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    assert client.post("/login", json={"token": token}, headers=evil).status_code == 403
    assert client.post("/logout", headers=evil).status_code == 403
    assert (
        client.post("/login", content=f'{{"token": "{token}"}}', headers={"Content-Type": "text/plain"}).status_code
        == 415
    )
    assert SESSION_COOKIE not in client.cookies


def test_a_bearer_speaks_for_the_request_over_a_session_cookie(client: TestClient[Any]) -> None:
    token = client.post("/users", json={"name": "bob", "role": "viewer"}, headers=ADMIN).json()["token"]
    assert client.post("/login", json={"token": token}).status_code == 200
    assert client.get("/me").json()["actor"] == "user:bob"
    assert client.get("/me", headers=ADMIN).json()["actor"] == "owner:admin-token"
    assert client.get("/me", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_without_auth_oidc_the_sso_routes_answer_501_and_the_login_state_says_so(
    tmp_path: Path, backend: Backend
) -> None:
    mesh = Mesh(load_settings(make_config(tmp_path, backend, "auth: {admin_token: adm1n}"), env={}))
    with TestClient(create_app(mesh)) as c:
        assert c.get("/login").json() == {"sso": False, "sso_label": "", "session_hours": 12, "who": None}
        assert c.get("/login", headers=ADMIN).json()["who"]["actor"] == "owner:admin-token"
        assert c.get("/login/oidc", follow_redirects=False).status_code == 501
        assert c.get(CALLBACK, params={"state": "x", "code": "y"}).status_code == 501


def test_an_unreachable_provider_is_a_502_page(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend, oidc_block("http://127.0.0.1:9"))
    with TestClient(create_app(Mesh(load_settings(cfg, env={})))) as c:
        down = c.get("/login/oidc", follow_redirects=False)
    assert down.status_code == 502 and "discovery document cannot be read" in down.text


# --- the claim mapping and its settings ---

CONFIG = OidcSettings(
    issuer="https://idp.example",
    client_id="c",
    role_claim="realm_access.roles",
    roles={
        "viewers": "viewer",
        "pets": OidcRole(role="approver", approve_tools=("*pet*",)),
        "notes": OidcRole(role="approver", approve_tools=("put_notes_*",), approve_agents=("claude",)),
        "ops": "admin",
    },
)


def test_the_highest_mapped_role_wins_and_an_approvers_scopes_merge() -> None:
    claims = {"preferred_username": "Alice", "realm_access": {"roles": ["viewers", "pets", "notes", "other"]}}
    who = identity_from_claims(CONFIG, claims)
    assert (who.name, who.role) == ("alice", "approver")
    assert who.approve_tools == ("*pet*", "put_notes_*") and who.approve_agents == ()  # pets is for any agent
    assert identity_from_claims(CONFIG, {**claims, "realm_access": {"roles": ["pets", "ops"]}}).role == "admin"
    only_notes = identity_from_claims(CONFIG, {**claims, "realm_access": {"roles": "notes"}})
    assert only_notes.approve_tools == ("put_notes_*",) and only_notes.approve_agents == ("claude",)


def test_the_name_comes_from_preferred_username_then_email_and_must_fit_flux7_names() -> None:
    roles = {"realm_access": {"roles": ["viewers"]}}
    assert identity_from_claims(CONFIG, {"email": "Bob@Example.com", **roles}).name == "bob@example.com"
    with pytest.raises(LoginRefused, match="no preferred_username or email claim"):
        identity_from_claims(CONFIG, {"sub": "123", **roles})
    with pytest.raises(LoginRefused, match="not a flux7 user name"):
        identity_from_claims(CONFIG, {"preferred_username": "Bob Smith", **roles})


def test_a_default_role_takes_users_no_value_maps() -> None:
    config = OidcSettings(issuer="https://idp.example", client_id="c", default_role="viewer")
    assert identity_from_claims(config, {"email": "x@example.com"}).role == "viewer"
    with pytest.raises(LoginRefused, match="maps to none"):
        identity_from_claims(CONFIG, {"email": "x@example.com"})


@pytest.mark.parametrize(
    ("oidc", "key"),
    [
        ({"issuer": "http://idp.example", "client_id": "c", "default_role": "viewer"}, "auth.oidc.issuer"),
        ({"issuer": "https://idp.example", "client_id": " ", "default_role": "viewer"}, "auth.oidc.client_id"),
        ({"issuer": "https://idp.example", "client_id": "c"}, "auth.oidc.roles"),
        ({"issuer": "https://idp.example", "client_id": "c", "scopes": ["email"], "default_role": "viewer"}, "scopes"),
        (
            {
                "issuer": "https://idp.example",
                "client_id": "c",
                "roles": {"x": {"role": "admin", "approve_tools": ["a"]}},
            },
            "x",
        ),
        ({"issuer": "https://idp.example", "client_id": "c", "roles": {"x": "superuser"}}, "roles"),
    ],
)
def test_a_bad_oidc_setting_stops_the_start_naming_its_key(oidc: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(None, env={}, auth={"oidc": oidc})
    assert key in str(e.value)


def test_the_client_secret_comes_from_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "auth:\n  oidc: {issuer: 'https://idp.example', client_id: c, client_secret: '${IDP_SECRET}',"
        " default_role: viewer}\n"
    )
    oidc = load_settings(cfg, env={"IDP_SECRET": "from-env"}).auth.oidc
    assert oidc is not None and oidc.client_secret == "from-env"
