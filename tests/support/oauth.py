"""A client of flux7's OAuth authorization server that plays every part by hand over an httpx-like client (an
httpx.Client, or Litestar's TestClient): registration, authorization with PKCE, the human's consent through the
consent API, the token exchange. The SDK clients' own flows are tests/e2e/test_oauth_clients.py."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

__all__ = ["ADMIN", "REDIRECT", "OAuthPlayer", "Pkce", "query_of"]

ADMIN = {"Authorization": "Bearer adm1n"}
REDIRECT = "http://127.0.0.1:5555/callback"


@dataclass(frozen=True)
class Pkce:
    verifier: str = field(default_factory=lambda: secrets.token_urlsafe(48))

    @property
    def challenge(self) -> str:
        digest = hashlib.sha256(self.verifier.encode()).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def query_of(url: str) -> dict[str, str]:
    """The query parameters of a redirect (one value each)."""
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


@dataclass
class OAuthPlayer:
    http: Any  # httpx.Client or a Litestar TestClient
    base: str
    human: dict[str, str] = field(default_factory=lambda: dict(ADMIN))

    @property
    def resource(self) -> str:
        return f"{self.base}/mcp"

    def register(self, **metadata: Any) -> dict[str, Any]:
        body = {"client_name": "Claude", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
        r = self.http.post("/oauth/register", json={**body, **metadata})
        assert r.status_code == 201, r.text
        return dict(r.json())

    def authorize(self, client_id: str, pkce: Pkce, **params: str | None) -> httpx.Response:
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": pkce.challenge,
            "code_challenge_method": "S256",
            "state": "st4te",
            "resource": self.resource,
            **params,
        }
        query = {k: v for k, v in query.items() if v is not None}
        return self.http.get("/oauth/authorize", params=query, follow_redirects=False)  # type: ignore[no-any-return]

    def consent_request(self, client_id: str, pkce: Pkce, **params: str | None) -> str:
        """The id of the consent request an authorization redirects the browser to."""
        r = self.authorize(client_id, pkce, **params)
        assert r.status_code == 302, r.text
        location = r.headers["location"]
        assert location.startswith(f"{self.base}/console/#/oauth/consent?request="), location
        return location.rsplit("=", 1)[1]

    def decide(self, request_id: str, decision: str = "approve", agent: str = "") -> httpx.Response:
        body = {"agent": agent} if agent else {}
        return self.http.post(f"/oauth/requests/{request_id}/{decision}", json=body, headers=self.human)  # type: ignore[no-any-return]

    def code(self, client_id: str, pkce: Pkce, agent: str = "") -> str:
        r = self.decide(self.consent_request(client_id, pkce), "approve", agent)
        assert r.status_code == 200, r.text
        return query_of(r.json()["redirect_to"])["code"]

    def exchange(self, client_id: str, code: str, pkce: Pkce | None, **extra: str) -> httpx.Response:
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "client_id": client_id}
        if pkce is not None:
            form["code_verifier"] = pkce.verifier
        return self.http.post("/oauth/token", data={**form, "resource": self.resource, **extra})  # type: ignore[no-any-return]

    def refresh(self, client_id: str, refresh_token: str, **extra: str) -> httpx.Response:
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
        return self.http.post("/oauth/token", data={**form, **extra})  # type: ignore[no-any-return]

    def connect(self, agent: str = "claude", **metadata: Any) -> tuple[str, dict[str, Any]]:
        """The whole flow: (client id, the token answer)."""
        client_id = self.register(**metadata)["client_id"]
        pkce = Pkce()
        r = self.exchange(client_id, self.code(client_id, pkce, agent), pkce)
        assert r.status_code == 200, r.text
        return client_id, dict(r.json())
