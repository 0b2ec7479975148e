"""OAuth clients of flux7's authorization server, registered dynamically (RFC 7591): a managed agent's platform
(Claude, ChatGPT, an MCP SDK) registers itself, then asks a human to consent (shared/auth/oauth_connections.py).

Registering grants nothing, so registration is open. A client is what it says it is only as far as its redirect
URIs go: codes are delivered to those exact URIs, which shared/auth/redirect_uris.py admits (HTTPS, loopback HTTP,
a desktop app's own scheme). A client's secret (confidential clients) is kept as a
SHA-256, like every other secret here."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from typing import Any

import msgspec

from flux7.shared.auth.redirect_uris import redirect_target, redirect_uri_problem
from flux7.shared.errors import NotFound
from flux7.shared.store.db import Database

__all__ = [
    "AUTH_METHODS",
    "GRANT_TYPES",
    "SCOPE",
    "ClientStore",
    "OAuthClient",
    "RegistrationLimitError",
    "proposed_agent_id",
    "redirect_uri_problem",
]

SCOPE = "mcp"  # the one scope: act on /mcp (and /tool, /decide) as the consented agent, governed
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")
GRANT_TYPES = ("authorization_code", "refresh_token")
CLIENT_PREFIX = "f7c_"
_MAX_REDIRECT_URIS = 10
# A client nobody consented to is forgotten after this long (registration is open: the table must not grow).
_UNUSED_SECONDS = 86400.0


class RegistrationLimitError(Exception):
    """The address registered as many clients in the last minute as `oauth.registrations_per_minute` allows."""

    def __init__(self, limit: int, retry_after: int) -> None:
        super().__init__(f"at most {limit} client registrations a minute from one address; try again later")
        self.retry_after = retry_after


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def proposed_agent_id(client_name: str) -> str:
    """The agent id a consent page proposes for a client: its name as a slug (`Claude` -> `claude`)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", client_name.lower()).strip("-._")[:64].rstrip("-._")
    return slug or "oauth-client"


class OAuthClient(msgspec.Struct, frozen=True, kw_only=True):
    """A registered client. Its methods are authlib's ClientMixin (authlib.oauth2.rfc6749.models)."""

    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    token_endpoint_auth_method: str
    created_at: float
    metadata: dict[str, Any] = {}  # as the registration answered it (without the secret)
    secret_hash: str | None = None

    @property
    def redirect_hosts(self) -> list[str]:
        return sorted({redirect_target(u) for u in self.redirect_uris})

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "client_id": self.client_id,
            "client_name": self.name,
            "redirect_uris": list(self.redirect_uris),
            "redirect_hosts": self.redirect_hosts,
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "grant_types": list(self.grant_types),
            "created_at": self.created_at,
        }
        for key in ("client_uri", "logo_uri", "software_id", "software_version"):
            if isinstance(self.metadata.get(key), str):
                out[key] = self.metadata[key]
        return out

    # -- authlib's ClientMixin --

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        # One scope: whatever else a client asks for (Claude asks for `claudeai`) is not granted (RFC 6749 3.3),
        # and the token answer says what was.
        return SCOPE

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris  # exact matching (OAuth 2.1 section 4.1.1)

    def check_client_secret(self, client_secret: str) -> bool:
        return self.secret_hash is not None and hmac.compare_digest(_hash(client_secret), self.secret_hash)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.token_endpoint_auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


def _client(row: Any) -> OAuthClient:
    metadata = json.loads(row["metadata"])
    return OAuthClient(
        client_id=row["client_id"],
        name=row["name"],
        redirect_uris=tuple(metadata.get("redirect_uris") or ()),
        grant_types=tuple(metadata.get("grant_types") or ("authorization_code",)),
        token_endpoint_auth_method=str(metadata.get("token_endpoint_auth_method") or "none"),
        created_at=float(row["created_at"]),
        metadata=metadata,
        secret_hash=row["secret_hash"],
    )


class ClientStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    @staticmethod
    def new_client_id() -> str:
        return CLIENT_PREFIX + secrets.token_hex(16)

    def register(
        self,
        client_id: str,
        metadata: dict[str, Any],
        secret: str | None,
        *,
        registered_from: str = "",
        per_minute: int = 0,
    ) -> OAuthClient:
        """Store a client whose metadata the registration endpoint validated (shared/auth/oauth_server.py).
        RegistrationLimitError when `registered_from` already registered `per_minute` clients in the last minute
        (0: no limit); counted in the same transaction, so concurrent registrations cannot slip past it."""
        now = time.time()
        name = str(metadata.get("client_name") or "")
        with self._db.write() as conn:
            if per_minute > 0:
                recent = conn.execute(
                    "SELECT count(*), min(created_at) FROM oauth_clients WHERE registered_from = ? AND created_at > ?",
                    (registered_from, now - 60.0),
                ).fetchone()
                if int(recent[0]) >= per_minute:
                    raise RegistrationLimitError(per_minute, max(1, int(float(recent[1]) + 60.0 - now) + 1))
            # Forget clients nobody consented to, while we hold the writer anyway.
            conn.execute(
                "DELETE FROM oauth_clients WHERE created_at < ? AND client_id NOT IN "
                "(SELECT client_id FROM oauth_connections) AND client_id NOT IN "
                "(SELECT client_id FROM oauth_requests WHERE expires_at > ?)",
                (now - _UNUSED_SECONDS, now),
            )
            conn.execute(
                "INSERT INTO oauth_clients (client_id, secret_hash, name, metadata, created_at, registered_from) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (client_id, _hash(secret) if secret else None, name, json.dumps(metadata), now, registered_from),
            )
        row = {"client_id": client_id, "name": name, "metadata": json.dumps(metadata), "created_at": now}
        return _client({**row, "secret_hash": _hash(secret) if secret else None})

    def get(self, client_id: str) -> OAuthClient | None:
        """A registered client (`f7c_…`), or the last fetched copy of a metadata document's (an https URL:
        shared/auth/client_metadata.py fetches it)."""
        if not isinstance(client_id, str):
            return None
        registered = client_id.startswith(CLIENT_PREFIX) and len(client_id) <= 100
        if not registered and not (client_id.startswith("https://") and len(client_id) <= 2000):
            return None
        row = self._db.query_one("SELECT * FROM oauth_clients WHERE client_id = ?", (client_id,))
        return _client(row) if row is not None else None

    def store_document(self, url: str, metadata: dict[str, Any], *, now: float) -> OAuthClient:
        """Keep a metadata document's client (checked by shared/auth/client_metadata.py), its `created_at` the
        time of this fetch: a public client, no secret."""
        metadata = {**metadata, "client_id": url}
        name = str(metadata.get("client_name") or "")
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO oauth_clients (client_id, secret_hash, name, metadata, created_at) "
                "VALUES (?, NULL, ?, ?, ?) ON CONFLICT (client_id) DO UPDATE SET "
                "name = excluded.name, metadata = excluded.metadata, created_at = excluded.created_at",
                (url, name, json.dumps(metadata), now),
            )
        return _client(
            {"client_id": url, "name": name, "metadata": json.dumps(metadata), "created_at": now, "secret_hash": None}
        )

    def list(self) -> list[OAuthClient]:
        return [_client(r) for r in self._db.query("SELECT * FROM oauth_clients ORDER BY created_at, client_id")]

    def delete(self, client_id: str, *, by: str) -> OAuthClient:
        """Delete a client and revoke its connections: its next request is `invalid_client` (401), and a
        conforming client registers again."""
        client = self.get(client_id)
        if client is None:
            raise NotFound(f"no OAuth client {client_id}")
        now = time.time()
        with self._db.write() as conn:
            conn.execute(
                "UPDATE oauth_connections SET revoked_at = ?, revoked_by = ? "
                "WHERE client_id = ? AND revoked_at IS NULL",
                (now, by, client_id),
            )
            conn.execute("DELETE FROM oauth_requests WHERE client_id = ? AND decision = ''", (client_id,))
            conn.execute("DELETE FROM oauth_clients WHERE client_id = ?", (client_id,))
        return client
