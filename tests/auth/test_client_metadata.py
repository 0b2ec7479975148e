"""Client ID Metadata Documents (shared/auth/client_metadata.py): a client whose id is an https URL, its document
fetched from a real HTTPS server on loopback, through the outbound guard; then the whole authorization in process
with that client, no registration."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from authlib.oauth2.rfc6749 import InvalidClientError
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.auth.client_metadata import (
    FRESH_SECONDS,
    MAX_FETCHES,
    STALE_SECONDS,
    ClientMetadataDocuments,
    TemporarilyUnavailableError,
    metadata_url_problem,
)
from flux7.shared.auth.oauth_clients import ClientStore
from flux7.shared.mesh import Mesh
from flux7.shared.settings import OAuthSettings, load_settings
from flux7.shared.store.db import Database
from tests.functions.conftest import make_config
from tests.notify.smtp import self_signed
from tests.support.http import serve_json
from tests.support.oauth import ADMIN, REDIRECT, OAuthPlayer, Pkce, query_of
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

PATH = "/oauth/client.json"


class Site:
    """An HTTPS server on loopback publishing one document (or whatever a test puts in `answer`)."""

    def __init__(self, url: str, seen: list[dict[str, Any]], ca_file: Path) -> None:
        self.base, self.seen, self.ca_file = url, seen, ca_file
        self.client_id = url + PATH
        self.answer: Any = (200, self.document())  # or answer(path) -> the answer
        self.hold: threading.Event | None = None  # set: each request waits for it

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[Any, ...]:
        if self.hold is not None:
            self.hold.wait(30)
        return self.answer(path) if callable(self.answer) else self.answer  # type: ignore[no-any-return]

    def document(self, **changes: Any) -> dict[str, Any]:
        doc = {
            "client_id": self.base + PATH,
            "client_name": "Claude",
            "client_uri": "https://claude.ai",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        return {k: v for k, v in {**doc, **changes}.items() if v is not None}


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    box: list[Site] = []
    with serve_json(lambda *request: box[0].handle(*request), tls=tls) as (url, seen):
        box.append(Site(url, seen, cert))
        yield box[0]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def documents(tmp_path: Path, site: Site, clock: Clock, *, networks: tuple[str, ...] = ("127.0.0.0/8",)) -> Any:
    settings = OAuthSettings(client_metadata_networks=networks, client_metadata_ca_file=str(site.ca_file))
    store = ClientStore(Database(tmp_path / "flux7.db"))
    return ClientMetadataDocuments(settings, store, clock=clock), store


def refusal(docs: ClientMetadataDocuments, url: str) -> str:
    with pytest.raises(InvalidClientError) as e:
        docs.client(url)
    return str(e.value.description)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://claude.ai/client.json", "an https URL"),
        ("https://claude.ai", "a path"),
        ("https://claude.ai/", "a path"),
        ("https://claude.ai/a/../client.json", "without . or .."),
        ("https://me:pw@claude.ai/client.json", "no user name"),
        ("https://claude.ai/client.json?v=1", "no query"),
        ("https://claude.ai/client.json#x", "no fragment"),
        ("https://claude.ai:x/client.json", "not a URL"),
        ("https://claude.ai/" + "a" * 2000, "at most 2000"),
    ],
)
def test_a_client_id_url_the_draft_does_not_allow_is_refused(url: str, problem: str) -> None:
    assert problem in metadata_url_problem(url)
    assert metadata_url_problem("https://claude.ai/oauth/mcp-client.json") == ""


def test_a_document_is_fetched_once_kept_an_hour_then_fetched_again(tmp_path: Path, site: Site) -> None:
    clock = Clock()
    docs, store = documents(tmp_path, site, clock)
    client = docs.client(site.client_id)
    assert client.client_id == site.client_id and client.name == "Claude"
    assert client.redirect_uris == (REDIRECT,) and client.token_endpoint_auth_method == "none"
    assert client.secret_hash is None and client.view()["client_uri"] == "https://claude.ai"
    assert [r["path"] for r in site.seen] == [PATH] and site.seen[0]["headers"]["accept"] == "application/json"
    clock.now += FRESH_SECONDS - 1
    assert docs.client(site.client_id).name == "Claude" and len(site.seen) == 1
    site.answer = (200, site.document(client_name="Claude (new name)"))
    clock.now += 2
    assert docs.client(site.client_id).name == "Claude (new name)" and len(site.seen) == 2
    assert store.get(site.client_id).name == "Claude (new name)"  # one row, updated


BROKEN = [
    (lambda s: (200, s.document(client_id="https://evil.example/c.json")), "not its own URL"),
    (lambda s: (200, s.document(client_secret="s3cret")), "never carries a client secret"),
    (lambda s: (200, s.document(token_endpoint_auth_method="private_key_jwt")), "only public clients"),
    (lambda s: (200, s.document(redirect_uris=None)), "at least one redirect URI"),
    (lambda s: (200, s.document(redirect_uris=["http://evil.example/cb"])), "redirect"),
    (lambda s: (200, s.document(grant_types=["client_credentials"])), "grant_types within"),
    (lambda s: (200, [s.document()]), "not a JSON object"),
    (lambda s: (200, b"{not json"), "not JSON"),
    (lambda s: (200, json.dumps(s.document(client_name="x" * 100, logo_uri="y" * 5000)).encode()), "larger"),
    (lambda s: (302, {}, {"Location": "https://evil.example/c.json"}), "redirects are not followed"),
    (lambda s: (404, {}), "answered 404"),
]


@pytest.mark.parametrize(("answer", "why"), BROKEN, ids=[why for _, why in BROKEN])
def test_a_document_that_breaks_a_rule_is_refused_and_says_why(
    tmp_path: Path, site: Site, answer: Any, why: str
) -> None:
    site.answer = answer(site)
    docs, store = documents(tmp_path, site, Clock())
    assert why in refusal(docs, site.client_id)
    assert store.get(site.client_id) is None


def test_a_document_on_a_private_address_is_not_fetched_unless_its_network_is_allowed(
    tmp_path: Path, site: Site
) -> None:
    docs, _ = documents(tmp_path, site, Clock(), networks=())
    assert "not globally routable" in refusal(docs, site.client_id)
    assert site.seen == []  # refused before connecting


def test_an_answer_that_refuses_is_not_an_outage_the_last_copy_does_not_stand_in(tmp_path: Path, site: Site) -> None:
    clock = Clock()
    docs, _ = documents(tmp_path, site, clock)
    docs.client(site.client_id)
    site.answer = (410, {})  # the publisher withdrew it
    clock.now += FRESH_SECONDS + 1
    assert "answered 410" in refusal(docs, site.client_id)


def test_an_unreachable_host_falls_back_to_the_last_copy_until_it_is_a_day_old(tmp_path: Path, site: Site) -> None:
    clock = Clock()
    docs, store = documents(tmp_path, site, clock)
    fetched = docs.client(site.client_id)
    # the same client id, its host now down: the stored copy is moved under an address nothing listens on
    gone = site.client_id.replace(site.base, "https://127.0.0.1:1")
    store.store_document(gone, {**fetched.metadata, "client_id": gone}, now=clock.now)
    clock.now += FRESH_SECONDS + 1
    assert docs.client(gone).name == "Claude"
    clock.now += STALE_SECONDS
    assert "could not be fetched" in refusal(docs, gone)
    never = gone.replace("client.json", "never-fetched.json")
    assert "could not be fetched" in refusal(docs, never)


def test_a_flood_of_slow_documents_takes_four_threads_and_no_more(tmp_path: Path, site: Site) -> None:
    """Anyone may send a client id URL, and a fetch holds a request thread up to five seconds: while four are
    under way, a fifth is refused at once (temporarily_unavailable), and accepted once they are done."""
    docs, _ = documents(tmp_path, site, Clock())
    site.answer = lambda path: (200, site.document(client_id=site.base + path))
    site.hold = threading.Event()
    urls = [f"{site.base}/oauth/client-{i}.json" for i in range(MAX_FETCHES + 1)]
    got: list[str] = []
    threads = [threading.Thread(target=lambda u=u: got.append(docs.client(u).client_id)) for u in urls[:-1]]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(site.seen) == MAX_FETCHES, 10, "four fetches waiting on the site")
        with pytest.raises(TemporarilyUnavailableError) as refused:
            docs.client(urls[-1])
        assert refused.value.status_code == 503 and len(site.seen) == MAX_FETCHES
    finally:
        site.hold.set()
        for t in threads:
            t.join(10)
    assert sorted(got) == sorted(urls[:-1])
    assert docs.client(urls[-1]).client_id == urls[-1]


def test_with_documents_off_a_url_client_id_is_an_unknown_client(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}\noauth: {client_metadata_documents: false}")
    with TestClient(create_app(Mesh(load_settings(cfg, env={}))), base_url="http://127.0.0.1:9090") as http:
        meta = http.get("/.well-known/oauth-authorization-server").json()
        assert meta["client_id_metadata_document_supported"] is False
        r = OAuthPlayer(http, "http://127.0.0.1:9090").authorize("https://claude.ai/oauth/client.json", Pkce())
        assert r.status_code in (400, 401) and r.json()["error"] == "invalid_client", r.text


def test_a_client_known_by_its_document_connects_without_registering(
    tmp_path: Path, backend: Backend, site: Site
) -> None:
    """The whole authorization in process: the metadata says documents are taken; the client sends its URL as
    client_id; the consent page shows it; a human approves; the code and the refresh token are exchanged under it."""
    extra = (
        "auth: {admin_token: adm1n}\n"
        f"oauth: {{client_metadata_networks: [127.0.0.0/8], client_metadata_ca_file: '{site.ca_file}'}}"
    )
    cfg = make_config(tmp_path, backend, extra)
    base = "http://127.0.0.1:9090"
    with TestClient(create_app(Mesh(load_settings(cfg, env={}))), base_url=base) as http:
        assert http.get("/.well-known/oauth-authorization-server").json()["client_id_metadata_document_supported"]
        oauth = OAuthPlayer(http, base)
        pkce = Pkce()
        request_id = oauth.consent_request(site.client_id, pkce)
        shown = http.get(f"/oauth/requests/{request_id}", headers=ADMIN).json()
        assert shown["client"]["client_id"] == site.client_id and shown["client"]["client_name"] == "Claude"
        assert shown["redirect_uri"] == REDIRECT and shown["agent"] == "claude"
        decided = oauth.decide(request_id, "approve", agent="claude-web")
        assert decided.status_code == 200, decided.text
        tokens = oauth.exchange(site.client_id, query_of(decided.json()["redirect_to"])["code"], pkce)
        assert tokens.status_code == 200, tokens.text
        refreshed = oauth.refresh(site.client_id, tokens.json()["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        listed = http.get("/oauth/tokens", headers=ADMIN).json()
        assert [(c["client_id"], c["agent_id"]) for c in listed] == [(site.client_id, "claude-web")]
        # a redirect URI the document does not list is refused here, not followed
        wrong = oauth.authorize(site.client_id, Pkce(), redirect_uri="http://127.0.0.1:5555/elsewhere")
        assert wrong.status_code == 400 and "location" not in wrong.headers, wrong.text
        assert len(site.seen) == 1  # one fetch served the whole flow
        # deleted (its id in the query: a path cannot carry a URL): its connection is revoked, its copy forgotten
        gone = http.delete("/oauth/clients", params={"client_id": site.client_id}, headers=ADMIN)
        assert gone.status_code == 200 and gone.json()["client_id"] == site.client_id, gone.text
        assert [c["state"] for c in http.get("/oauth/tokens", headers=ADMIN).json()] == ["revoked"]
        assert http.delete("/oauth/clients", params={"client_id": site.client_id}, headers=ADMIN).status_code == 404
        oauth.consent_request(site.client_id, Pkce())  # it comes back: the document is fetched anew
        assert len(site.seen) == 2
