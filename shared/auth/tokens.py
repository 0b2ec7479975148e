"""Per-agent bearer tokens: issued once, stored as a SHA-256, looked up by that hash, revoked by id or prefix.

A token is `f7a_` + 43 URL-safe characters (256 random bits). Such a token cannot be guessed, so a plain hash
lookup is enough: the database compares hashes, never the secret, and nothing compares the secret byte by byte.
The store is the one shared by the data plane (identity), the REST routes and `flux7 token …`; later commands
(enable, rotate, show) build on `issue`, `revoke` and `find`."""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import secrets
import time
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.durations import parse_duration
from flux7.shared.errors import BadRequest, Conflict, NotFound
from flux7.shared.store.db import Database

__all__ = [
    "PREFIX",
    "AgentToken",
    "IssuedToken",
    "TokenStore",
    "TokenView",
    "hash_token",
    "looks_like_agent_token",
    "parse_expiry",
    "validate_agent_id",
]

PREFIX = "f7a_"
_SHOWN = 12  # characters of the token kept in clear, to recognise it in lists (prefix plus 8 random ones)
_AGENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")
# last_used_at is refreshed at most this often, so a busy agent does not write on every call.
_TOUCH_SECONDS = 60.0


class AgentToken(msgspec.Struct, frozen=True, kw_only=True):
    """A stored token as lists and the REST routes show it: never the secret, never its hash."""

    id: str
    agent_id: str
    prefix: str
    note: str = ""
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None

    def state(self, now: float | None = None) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (time.time() if now is None else now):
            return "expired"
        return "active"

    def view(self, token: str | UnsetType = UNSET) -> TokenView:
        return TokenView(
            id=self.id,
            agent_id=self.agent_id,
            prefix=self.prefix,
            note=self.note,
            created_at=self.created_at,
            expires_at=self.expires_at,
            revoked_at=self.revoked_at,
            last_used_at=self.last_used_at,
            state=self.state(),
            token=token,
        )


class TokenView(msgspec.Struct, frozen=True, kw_only=True):
    """A token's record as the REST routes show it, with its state; `token` (the secret) only in the answer to its
    issue."""

    id: str
    agent_id: str
    prefix: str
    note: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None
    state: str  # active | expired | revoked
    token: str | UnsetType = UNSET


class IssuedToken(msgspec.Struct, frozen=True, kw_only=True):
    """What `issue` answers: the record and the token itself, which is shown this once and never stored."""

    record: AgentToken
    token: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def looks_like_agent_token(bearer: str) -> bool:
    return bearer.startswith(PREFIX)


def validate_agent_id(agent_id: str) -> str:
    if not _AGENT.fullmatch(agent_id):
        raise BadRequest(
            f"invalid agent id {agent_id!r}: 1-128 characters, letters, digits and . _ : @ / + - "
            "(starting with a letter or digit)"
        )
    return agent_id


# Ten years: a longer expiry is a mistake (or an attempt at a token that never expires; say `never` for that).
MAX_EXPIRY_SECONDS = 10 * 365 * 86400.0
_DAYS = re.compile(r"\d+(\.\d+)?d")


def parse_expiry(text: str, now: float | None = None) -> float | None:
    """`--expires`: a duration from now ("30d", "12h", "90m"), at most ten years; "" or "never" for no expiry."""
    s = text.strip()
    if not s or s == "never":
        return None
    try:
        # float() alone would take "infd" and "nand" (and "1e309d", which is inf): days are plain decimals only
        seconds = float(s[:-1]) * 86400 if _DAYS.fullmatch(s) else parse_duration(s)
    except ValueError:
        raise BadRequest(f"invalid expiry {text!r}: a duration such as 30d, 12h or 90m, or never") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise BadRequest(f"invalid expiry {text!r}: must be in the future")
    if seconds > MAX_EXPIRY_SECONDS:
        raise BadRequest(f"invalid expiry {text!r}: at most 3650d; say never for a token that does not expire")
    return (time.time() if now is None else now) + seconds


def _record(row: Any) -> AgentToken:
    return AgentToken(
        id=row["id"],
        agent_id=row["agent_id"],
        prefix=row["prefix"],
        note=row["note"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )


class TokenStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    def issue(self, agent_id: str, *, note: str = "", expires_at: float | None = None) -> IssuedToken:
        validate_agent_id(agent_id)
        if len(note) > 500:
            raise BadRequest("note: at most 500 characters")
        now = time.time()
        if expires_at is not None and expires_at <= now:
            raise BadRequest("expires_at must be in the future")
        token = PREFIX + secrets.token_urlsafe(32)
        record = AgentToken(
            id="tok_" + secrets.token_hex(6),
            agent_id=agent_id,
            prefix=token[:_SHOWN],
            note=note,
            created_at=now,
            expires_at=expires_at,
        )
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO agent_tokens (id, agent_id, token_hash, prefix, note, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.id, agent_id, hash_token(token), record.prefix, note, now, expires_at),
            )
        return IssuedToken(record=record, token=token)

    def authenticate(self, token: str) -> AgentToken | None:
        """The live token record for this bearer, or None (unknown, revoked or expired)."""
        if not looks_like_agent_token(token) or len(token) > 200:
            return None
        row = self._db.query_one("SELECT * FROM agent_tokens WHERE token_hash = ?", (hash_token(token),))
        if row is None:
            return None
        record = _record(row)
        now = time.time()
        if record.state(now) != "active":
            return None
        if record.last_used_at is None or record.last_used_at < now - _TOUCH_SECONDS:
            # bookkeeping only: a busy database must not refuse a valid token
            with contextlib.suppress(Exception):
                self._db.execute("UPDATE agent_tokens SET last_used_at = ? WHERE id = ?", (now, record.id))
        return record

    def list(self, *, agent_id: str = "", include_revoked: bool = True) -> list[AgentToken]:
        sql, params = "SELECT * FROM agent_tokens", []
        where = []
        if agent_id and not _AGENT.fullmatch(agent_id):
            return []  # no token has such an id (and PostgreSQL refuses a NUL byte in a text parameter)
        if agent_id:
            where.append("agent_id = ?")
            params.append(agent_id)
        if not include_revoked:
            where.append("revoked_at IS NULL")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_record(r) for r in self._db.query(sql + " ORDER BY created_at, id", tuple(params))]

    def find(self, ref: str) -> AgentToken:
        """The one token named by its id (`tok_…`) or by a prefix of the token itself (at least `f7a_` + 4)."""
        ref = ref.strip()
        if ref.startswith("tok_"):
            row = self._db.query_one("SELECT * FROM agent_tokens WHERE id = ?", (ref,))
            if row is None:
                raise NotFound(f"no token with id {ref}")
            return _record(row)
        if not looks_like_agent_token(ref) or len(ref) < len(PREFIX) + 4:
            raise BadRequest(
                f"name a token by its id (tok_…) or by its first characters (f7a_ and at least 4 more): {ref!r}"
            )
        if len(ref) > _SHOWN:  # the whole token (or more than is kept in clear): look it up by its hash
            row = self._db.query_one("SELECT * FROM agent_tokens WHERE token_hash = ?", (hash_token(ref),))
            if row is None:
                raise NotFound("no such token")
            return _record(row)
        rows = self._db.query("SELECT * FROM agent_tokens WHERE substr(prefix, 1, ?) = ?", (len(ref), ref))
        if not rows:
            raise NotFound(f"no token starts with {ref}")
        if len(rows) > 1:
            raise Conflict(f"{ref} matches {len(rows)} tokens: give more characters or the id")
        return _record(rows[0])

    def revoke(self, ref: str) -> AgentToken:
        """Revoke the token named by id or prefix; revoking a revoked token is a no-op that answers its record."""
        record = self.find(ref)
        if record.revoked_at is not None:
            return record
        now = time.time()
        self._db.execute("UPDATE agent_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, record.id))
        return msgspec.structs.replace(record, revoked_at=now)
