"""What a named human's consent grants an OAuth client, as rows: the authorization code that carries the decision
to the client, and the connection (one consent) with the access and refresh tokens issued and rotated under it.
(The request waiting for the human is shared/auth/oauth_requests.py.)

A connection acts as one agent id, the one the human picked, and is bound to that human: revoked with the
connection, with its client, or when the human's user is disabled. Tokens are opaque (`f7o_…` access, `f7r_…`
refresh, 256 random bits each) and kept as SHA-256s, like agent tokens (shared/auth/tokens.py). A refresh token is
good once: using it rotates it, and presenting a rotated one again revokes the whole connection (OAuth 2.1
section 4.3.1); an authorization code presented twice does the same to what it granted (RFC 6749 section 4.1.2)."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import time
from typing import Any, Literal

import msgspec

from flux7.shared.errors import BadRequest, NotFound
from flux7.shared.store.db import Connection as DbConnection
from flux7.shared.store.db import Database

__all__ = [
    "ACCESS_PREFIX",
    "CODE_SECONDS",
    "CONNECTION_PREFIX",
    "REFRESH_PREFIX",
    "AccessRecord",
    "AuthorizationCode",
    "Connection",
    "ConnectionStore",
    "Consent",
    "RefreshRecord",
    "looks_like_oauth_token",
]

ACCESS_PREFIX = "f7o_"
REFRESH_PREFIX = "f7r_"
CONNECTION_PREFIX = "otk_"
CODE_SECONDS = 300.0  # a code is exchanged at once; RFC 6749 section 4.1.2 recommends ten minutes at most
_TOUCH_SECONDS = 60.0  # last_used_at is refreshed at most this often
_FORGET_SECONDS = 86400.0  # decided or expired requests, used codes and dead token rows are kept this long


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def looks_like_oauth_token(bearer: str) -> bool:
    return bearer.startswith((ACCESS_PREFIX, REFRESH_PREFIX))


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


class Consent(msgspec.Struct, frozen=True, kw_only=True):
    """The resource owner authlib sees: the agent a human consented to, and that human."""

    agent_id: str
    granted_by: str  # the human's actor: user:<name>, owner:admin-token
    request_id: str

    @property
    def granted_user(self) -> str:
        return self.granted_by[5:] if self.granted_by.startswith("user:") else ""


class AuthorizationCode(msgspec.Struct, frozen=True, kw_only=True):
    """A code as authlib's AuthorizationCodeMixin and its PKCE extension read it."""

    client_id: str
    redirect_uri: str
    scope: str
    resource: str
    code_challenge: str
    code_challenge_method: str
    consent: Consent

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


class RefreshRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A refresh token just rotated, as authlib's TokenMixin: the connection it continues."""

    connection_id: str
    client_id: str
    scope: str
    resource: str
    consent: Consent

    def check_client(self, client: Any) -> bool:
        return bool(client.get_client_id() == self.client_id)

    def get_scope(self) -> str:
        return self.scope


class AccessRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A live access token: who it makes the caller."""

    connection_id: str
    client_id: str
    agent_id: str
    resource: str
    expires_at: float


ConnectionState = Literal["active", "expired", "revoked"]


class Connection(msgspec.Struct, frozen=True, kw_only=True):
    """One consent and the tokens refreshed from it, as `GET /oauth/tokens` lists it (never a secret)."""

    id: str
    client_id: str
    client_name: str
    agent_id: str
    granted_by: str
    scope: str
    resource: str
    created_at: float
    expires_at: float | None = None  # the newest access token's
    refresh_expires_at: float | None = None  # the live refresh token's
    last_used_at: float | None = None
    revoked_at: float | None = None
    revoked_by: str = ""

    def state(self, now: float | None = None) -> ConnectionState:
        if self.revoked_at is not None:
            return "revoked"
        now = time.time() if now is None else now
        live = [t for t in (self.expires_at, self.refresh_expires_at) if t is not None and t > now]
        return "active" if live else "expired"


_CONNECTIONS = (
    "SELECT c.*, COALESCE(k.name, '') AS client_name, "
    "(SELECT MAX(t.access_expires_at) FROM oauth_tokens t WHERE t.connection_id = c.id) AS expires_at, "
    "(SELECT MAX(t.refresh_expires_at) FROM oauth_tokens t WHERE t.connection_id = c.id AND t.rotated_at IS NULL) "
    "AS refresh_expires_at FROM oauth_connections c LEFT JOIN oauth_clients k ON k.client_id = c.client_id"
)


def _connection(row: Any) -> Connection:
    return Connection(
        id=row["id"],
        client_id=row["client_id"],
        client_name=row["client_name"],
        agent_id=row["agent_id"],
        granted_by=row["granted_by"],
        scope=row["scope"],
        resource=row["resource"],
        created_at=float(row["created_at"]),
        expires_at=row["expires_at"],
        refresh_expires_at=row["refresh_expires_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
        revoked_by=row["revoked_by"],
    )


class ConnectionStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    @staticmethod
    def _forget(conn: DbConnection, now: float) -> None:
        """Drop what no one can use any more, while a write holds the writer anyway."""
        conn.execute("DELETE FROM oauth_codes WHERE expires_at < ?", (now - _FORGET_SECONDS,))
        conn.execute(
            "DELETE FROM oauth_tokens WHERE access_expires_at < ? AND COALESCE(refresh_expires_at, 0) < ?",
            (now - _FORGET_SECONDS, now - _FORGET_SECONDS),
        )

    # -- authorization codes ------------------------------------------------------------------------------

    def save_code(self, code: str, client_id: str, redirect_uri: str, params: dict[str, Any], consent: Consent) -> None:
        now = time.time()
        self._db.execute(
            "INSERT INTO oauth_codes (code_hash, client_id, request_id, redirect_uri, scope, resource, "
            "code_challenge, code_challenge_method, agent_id, granted_by, granted_user, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                _hash(code),
                client_id,
                consent.request_id,
                redirect_uri,
                params["scope"],
                params["resource"],
                params["code_challenge"],
                params["code_challenge_method"],
                consent.agent_id,
                consent.granted_by,
                consent.granted_user,
                now,
                now + CODE_SECONDS,
            ),
        )

    def take_code(self, code: str, client_id: str) -> tuple[AuthorizationCode | None, str]:
        """The code, marked used, when it is live and this client's; else None. A code used before revokes the
        connection it granted: (None, that connection's id) so the caller can record it."""
        if not isinstance(code, str) or len(code) > 200:
            return None, ""
        now = time.time()
        with self._db.write() as conn:
            row = conn.execute("SELECT * FROM oauth_codes WHERE code_hash = ?", (_hash(code),)).fetchone()
            if row is None or row["client_id"] != client_id:
                return None, ""
            if row["used_at"] is not None:
                revoked = self._revoke(conn, row["connection_id"], "system:code-reuse", now)
                return None, row["connection_id"] if revoked else ""
            if row["expires_at"] <= now:
                return None, ""
            conn.execute("UPDATE oauth_codes SET used_at = ? WHERE code_hash = ?", (now, row["code_hash"]))
        consent = Consent(agent_id=row["agent_id"], granted_by=row["granted_by"], request_id=row["request_id"])
        return AuthorizationCode(
            client_id=row["client_id"],
            redirect_uri=row["redirect_uri"],
            scope=row["scope"],
            resource=row["resource"],
            code_challenge=row["code_challenge"],
            code_challenge_method=row["code_challenge_method"],
            consent=consent,
        ), ""

    # -- tokens -------------------------------------------------------------------------------------------

    def start(self, code: str, token: dict[str, Any], code_record: AuthorizationCode, *, refresh_seconds: float) -> str:
        """A new connection with its first tokens, from an exchanged code. Returns the connection's id."""
        now = time.time()
        connection_id = CONNECTION_PREFIX + secrets.token_hex(6)
        consent = code_record.consent
        with self._db.write() as conn:
            self._forget(conn, now)
            conn.execute(
                "INSERT INTO oauth_connections (id, client_id, agent_id, granted_by, granted_user, scope, resource, "
                "request_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    connection_id,
                    code_record.client_id,
                    consent.agent_id,
                    consent.granted_by,
                    consent.granted_user,
                    code_record.scope,
                    code_record.resource,
                    consent.request_id,
                    now,
                ),
            )
            conn.execute("UPDATE oauth_codes SET connection_id = ? WHERE code_hash = ?", (connection_id, _hash(code)))
            self._insert_token(conn, connection_id, token, now, refresh_seconds)
        return connection_id

    def extend(self, connection_id: str, token: dict[str, Any], *, refresh_seconds: float) -> None:
        """The tokens a refresh issued, under the connection of the refresh token it rotated."""
        with self._db.write() as conn:
            self._insert_token(conn, connection_id, token, time.time(), refresh_seconds)

    @staticmethod
    def _insert_token(
        conn: DbConnection, connection_id: str, token: dict[str, Any], now: float, refresh_seconds: float
    ) -> None:
        refresh = token.get("refresh_token")
        conn.execute(
            "INSERT INTO oauth_tokens (access_hash, connection_id, refresh_hash, access_expires_at, "
            "refresh_expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                _hash(token["access_token"]),
                connection_id,
                _hash(refresh) if refresh else None,
                now + float(token["expires_in"]),
                now + refresh_seconds if refresh else None,
                now,
            ),
        )

    def take_refresh(self, refresh_token: str, client_id: str) -> tuple[RefreshRecord | None, str]:
        """The connection a live refresh token of this client continues, the token rotated (good once). A rotated
        token presented again revokes its connection: (None, that connection's id) so the caller can record it."""
        if (
            not isinstance(refresh_token, str)
            or not refresh_token.startswith(REFRESH_PREFIX)
            or len(refresh_token) > 200
        ):
            return None, ""
        now = time.time()
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT t.rotated_at, t.refresh_expires_at, t.access_hash, c.* FROM oauth_tokens t "
                "JOIN oauth_connections c ON c.id = t.connection_id WHERE t.refresh_hash = ?",
                (_hash(refresh_token),),
            ).fetchone()
            if row is None or row["revoked_at"] is not None or row["client_id"] != client_id:
                return None, ""
            if row["rotated_at"] is not None:
                revoked = self._revoke(conn, row["id"], "system:refresh-reuse", now)
                return None, row["id"] if revoked else ""
            if row["refresh_expires_at"] is None or row["refresh_expires_at"] <= now:
                return None, ""
            if not self._user_live(conn, row["granted_user"]):
                return None, ""
            conn.execute("UPDATE oauth_tokens SET rotated_at = ? WHERE access_hash = ?", (now, row["access_hash"]))
        consent = Consent(agent_id=row["agent_id"], granted_by=row["granted_by"], request_id=row["request_id"])
        return RefreshRecord(
            connection_id=row["id"],
            client_id=row["client_id"],
            scope=row["scope"],
            resource=row["resource"],
            consent=consent,
        ), ""

    @staticmethod
    def _user_live(conn: DbConnection, user: str) -> bool:
        if not user:
            return True
        row = conn.execute("SELECT disabled_at FROM users WHERE name = ?", (user,)).fetchone()
        return row is not None and row["disabled_at"] is None

    def authenticate(self, access_token: str) -> AccessRecord | None:
        """The live access token's record, or None: unknown, expired, its connection revoked, or the human who
        consented disabled."""
        if not access_token.startswith(ACCESS_PREFIX) or len(access_token) > 200:
            return None
        row = self._db.query_one(
            "SELECT t.access_expires_at, c.id, c.client_id, c.agent_id, c.resource, c.revoked_at, c.last_used_at, "
            "c.granted_user, u.name AS user_name, u.disabled_at AS user_disabled FROM oauth_tokens t "
            "JOIN oauth_connections c ON c.id = t.connection_id LEFT JOIN users u ON u.name = c.granted_user "
            "WHERE t.access_hash = ?",
            (_hash(access_token),),
        )
        now = time.time()
        if row is None or row["revoked_at"] is not None or row["access_expires_at"] <= now:
            return None
        if row["granted_user"] and (row["user_name"] is None or row["user_disabled"] is not None):
            return None
        if row["last_used_at"] is None or row["last_used_at"] < now - _TOUCH_SECONDS:
            with contextlib.suppress(Exception):  # bookkeeping: a busy store never refuses a valid token
                self._db.execute("UPDATE oauth_connections SET last_used_at = ? WHERE id = ?", (now, row["id"]))
        return AccessRecord(
            connection_id=row["id"],
            client_id=row["client_id"],
            agent_id=row["agent_id"],
            resource=row["resource"],
            expires_at=float(row["access_expires_at"]),
        )

    # -- connections --------------------------------------------------------------------------------------

    def list(self, *, agent_id: str = "", client_id: str = "") -> list[Connection]:
        sql, where, params = _CONNECTIONS, [], []
        for column, value in (("c.agent_id", agent_id), ("c.client_id", client_id)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_connection(r) for r in self._db.query(sql + " ORDER BY c.created_at, c.id", tuple(params))]

    def active_count(self, agent_id: str) -> int:
        return sum(1 for c in self.list(agent_id=agent_id) if c.state() == "active")

    def get(self, connection_id: str) -> Connection:
        if not connection_id.startswith(CONNECTION_PREFIX) or len(connection_id) > 64:
            raise NotFound(f"no OAuth connection {connection_id}")
        row = self._db.query_one(_CONNECTIONS + " WHERE c.id = ?", (connection_id,))
        if row is None:
            raise NotFound(f"no OAuth connection {connection_id}")
        return _connection(row)

    def find(self, ref: str) -> Connection:
        """The connection named by its id (`otk_…`) or by one of its tokens, whole (`f7o_…`, `f7r_…`)."""
        ref = ref.strip()
        if ref.startswith(CONNECTION_PREFIX):
            return self.get(ref)
        if not looks_like_oauth_token(ref) or len(ref) > 200:
            raise BadRequest(f"name an OAuth connection by its id (otk_…) or by a whole token (f7o_…, f7r_…): {ref!r}")
        column = "access_hash" if ref.startswith(ACCESS_PREFIX) else "refresh_hash"
        row = self._db.query_one(f"SELECT connection_id FROM oauth_tokens WHERE {column} = ?", (_hash(ref),))
        if row is None:
            raise NotFound("no such OAuth token")
        return self.get(row["connection_id"])

    def revoke(self, ref: str, *, by: str) -> Connection:
        """Revoke a connection (every token of it); revoking a revoked one answers its record."""
        connection = self.find(ref)
        if connection.revoked_at is not None:
            return connection
        now = time.time()
        with self._db.write() as conn:
            self._revoke(conn, connection.id, by, now)
        return msgspec.structs.replace(connection, revoked_at=now, revoked_by=by)

    @staticmethod
    def _revoke(conn: DbConnection, connection_id: str, by: str, now: float) -> bool:
        if not connection_id:
            return False
        return bool(
            conn.execute(
                "UPDATE oauth_connections SET revoked_at = ?, revoked_by = ? WHERE id = ? AND revoked_at IS NULL",
                (now, by, connection_id),
            ).rowcount
        )
