"""Named humans: users with a role, their personal tokens, and console sessions.

Roles (docs/security.md "Users and roles"):
- owner: everything, users included (the generated admin token is the bootstrap owner);
- admin: everything but users;
- approver: reads, and resolves approvals and creates grants within its scope (`approve_tools`,
  `approve_agents`: globs; empty means any);
- viewer: reads.

A personal token is `f7u_` + 43 URL-safe characters, kept as a SHA-256 like agent tokens (shared/auth/tokens.py):
it is shown once, rotated by issuing a new one (the old one stops working), and dies with its user's
disabling. A console session is a random id kept as a SHA-256 too, with an expiry."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import time
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.errors import BadRequest, Conflict, NotFound
from flux7.shared.globs import glob_match
from flux7.shared.store.db import Connection, Database

__all__ = [
    "ROLES",
    "SESSION_COOKIE",
    "SESSION_PREFIX",
    "USER_PREFIX",
    "IssuedUser",
    "Role",
    "User",
    "UserStore",
    "UserView",
    "looks_like_user_token",
]

Role = Literal["owner", "admin", "approver", "viewer"]
ROLES: tuple[Role, ...] = ("owner", "admin", "approver", "viewer")
USER_PREFIX = "f7u_"
SESSION_PREFIX = "f7s_"
SESSION_COOKIE = "flux7_session"  # HttpOnly, SameSite=Strict; Secure behind HTTPS (functions/login.py)
_NAME = re.compile(r"[a-z0-9][a-z0-9._@+-]{0,63}")
_SHOWN = 12
_TOUCH_SECONDS = 60.0


class User(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    role: Role
    approve_tools: tuple[str, ...] = ()  # an approver's tools (globs); empty: any
    approve_agents: tuple[str, ...] = ()  # an approver's agents (globs); empty: any
    email: str = ""
    source: str = "local"  # local (flux7 user add) | oidc (created at a single sign-on)
    created_at: float = 0.0
    created_by: str = ""
    disabled_at: float | None = None

    @property
    def actor(self) -> str:
        return f"user:{self.name}"

    def may_decide(self, tool: str, agent: str) -> bool:
        """Whether this user may resolve an approval of `agent` calling `tool` (or grant it)."""
        if self.disabled_at is not None or self.role == "viewer":
            return False
        if self.role in ("owner", "admin"):
            return True
        tools_ok = not self.approve_tools or any(glob_match(p, tool) for p in self.approve_tools)
        agents_ok = not self.approve_agents or any(glob_match(p, agent) for p in self.approve_agents)
        return tools_ok and agents_ok

    def view(self, token: str | UnsetType = UNSET) -> UserView:
        return UserView(
            name=self.name,
            role=self.role,
            approve_tools=list(self.approve_tools),
            approve_agents=list(self.approve_agents),
            source=self.source,
            created_at=self.created_at,
            created_by=self.created_by,
            disabled=self.disabled_at is not None,
            email=self.email or UNSET,
            token=token,
        )


class UserView(msgspec.Struct, kw_only=True):
    """A user as the REST routes and `flux7 user … --json` show it; `token` only in the answer that issued it."""

    name: str
    role: str
    approve_tools: list[str]
    approve_agents: list[str]
    source: str  # local | oidc
    created_at: float
    created_by: str
    disabled: bool
    email: str | UnsetType = UNSET
    token: str | UnsetType = UNSET  # a new personal token (add, rotate): shown once


class IssuedUser(msgspec.Struct, frozen=True):
    """A user and its new personal token, shown this once."""

    user: User
    token: str


def looks_like_user_token(bearer: str) -> bool:
    return bearer.startswith(USER_PREFIX)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def validate_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise BadRequest(
            f"invalid user name {name!r}: 1-64 characters, lower-case letters, digits and . _ @ + - "
            "(starting with a letter or digit)"
        )
    return name


def validate_role(role: str) -> Role:
    if role not in ROLES:
        raise BadRequest(f"invalid role {role!r}: one of {', '.join(ROLES)}")
    return role


def _globs(values: list[str] | tuple[str, ...], what: str) -> tuple[str, ...]:
    out = tuple(v.strip() for v in values if v.strip())
    for v in out:
        if len(v) > 200 or "\x00" in v:
            raise BadRequest(f"{what}: a glob of at most 200 characters")
    return out


def _user(r: Any) -> User:
    """A `users` row (by column name, on both engines)."""
    return User(
        name=r["name"],
        role=r["role"],
        approve_tools=tuple(json.loads(r["approve_tools"])),
        approve_agents=tuple(json.loads(r["approve_agents"])),
        email=r["email"],
        source=r["source"],
        created_at=float(r["created_at"]),
        created_by=r["created_by"],
        disabled_at=r["disabled_at"],
    )


class UserStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- users ----------------------------------------------------------------------------------------------

    def add(
        self,
        name: str,
        role: str,
        *,
        approve_tools: list[str] | tuple[str, ...] = (),
        approve_agents: list[str] | tuple[str, ...] = (),
        email: str = "",
        by: str = "",
    ) -> IssuedUser:
        """A new local user and its first personal token. 409 when the name is taken."""
        user = User(
            name=validate_name(name),
            role=validate_role(role),
            approve_tools=_globs(approve_tools, "approve_tools"),
            approve_agents=_globs(approve_agents, "approve_agents"),
            email=email.strip(),
            created_at=time.time(),
            created_by=by,
        )
        if (user.approve_tools or user.approve_agents) and user.role != "approver":
            raise BadRequest("--approve-tools and --approve-agents scope an approver; other roles are not scoped")
        token = USER_PREFIX + secrets.token_urlsafe(32)
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM users WHERE name = ?", (user.name,)).fetchone() is not None:
                raise Conflict(f"user {user.name!r} exists")
            self._insert(conn, user)
            self._insert_token(conn, user.name, token)
        return IssuedUser(user, token)

    def upsert_sso(
        self,
        name: str,
        role: str,
        email: str = "",
        *,
        approve_tools: list[str] | tuple[str, ...] = (),
        approve_agents: list[str] | tuple[str, ...] = (),
    ) -> User:
        """A user seen at a single sign-on: created with the role (and an approver's scope) its claims map to, or
        updated to it (the identity provider is the authority for SSO users). A disabled user stays disabled; a
        local user keeps its role and scope (the operator's choice wins over a claim)."""
        name, role = validate_name(name), validate_role(role)
        tools = _globs(approve_tools, "approve_tools") if role == "approver" else ()
        agents = _globs(approve_agents, "approve_agents") if role == "approver" else ()
        with self._db.write() as conn:
            row = conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
            if row is None:
                user = User(
                    name=name,
                    role=role,
                    approve_tools=tools,
                    approve_agents=agents,
                    email=email,
                    source="oidc",
                    created_at=time.time(),
                    created_by="sso",
                )
                self._insert(conn, user)
                return user
            existing = _user(row)
            changed = (existing.role, existing.email, existing.approve_tools, existing.approve_agents) != (
                role,
                email,
                tools,
                agents,
            )
            if existing.source == "oidc" and changed:
                conn.execute(
                    "UPDATE users SET role = ?, email = ?, approve_tools = ?, approve_agents = ? WHERE name = ?",
                    (role, email, json.dumps(list(tools)), json.dumps(list(agents)), name),
                )
                return msgspec.structs.replace(
                    existing, role=role, email=email, approve_tools=tools, approve_agents=agents
                )
            return existing

    @staticmethod
    def _insert(conn: Connection, user: User) -> None:
        conn.execute(
            "INSERT INTO users (name, role, approve_tools, approve_agents, email, source, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                user.name,
                user.role,
                json.dumps(list(user.approve_tools)),
                json.dumps(list(user.approve_agents)),
                user.email,
                user.source,
                user.created_at,
                user.created_by,
            ),
        )

    def get(self, name: str) -> User:
        row = self._db.query_one("SELECT * FROM users WHERE name = ?", (name,))
        if row is None:
            raise NotFound(f"no user {name!r}")
        return _user(row)

    def list(self) -> list[User]:
        return [_user(r) for r in self._db.query("SELECT * FROM users ORDER BY name")]

    def count(self) -> int:
        row = self._db.query_one("SELECT count(*) FROM users WHERE disabled_at IS NULL")
        return int(row[0]) if row is not None else 0

    def disable(self, name: str) -> User:
        """Disable a user: its tokens and console sessions stop working at once. Disabling twice is a no-op."""
        user = self.get(name)
        if user.disabled_at is not None:
            return user
        now = time.time()
        with self._db.write() as conn:
            conn.execute("UPDATE users SET disabled_at = ? WHERE name = ?", (now, name))
            conn.execute(
                "UPDATE user_tokens SET revoked_at = ? WHERE user_name = ? AND revoked_at IS NULL", (now, name)
            )
            conn.execute("DELETE FROM console_sessions WHERE user_name = ?", (name,))
        return msgspec.structs.replace(user, disabled_at=now)

    def rotate(self, name: str) -> IssuedUser:
        """A new personal token for the user; every earlier one stops working."""
        user = self.get(name)
        if user.disabled_at is not None:
            raise Conflict(f"user {name!r} is disabled")
        token = USER_PREFIX + secrets.token_urlsafe(32)
        with self._db.write() as conn:
            conn.execute(
                "UPDATE user_tokens SET revoked_at = ? WHERE user_name = ? AND revoked_at IS NULL", (time.time(), name)
            )
            self._insert_token(conn, name, token)
        return IssuedUser(user, token)

    @staticmethod
    def _insert_token(conn: Connection, name: str, token: str) -> None:
        conn.execute(
            "INSERT INTO user_tokens (id, user_name, token_hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)",
            ("utk_" + secrets.token_hex(6), name, _hash(token), token[:_SHOWN], time.time()),
        )

    def authenticate(self, token: str) -> User | None:
        """The live user of a personal token, or None (unknown, rotated away, or its user disabled)."""
        if not looks_like_user_token(token) or len(token) > 200:
            return None
        row = self._db.query_one(
            "SELECT u.*, t.id AS token_id, t.last_used_at AS token_used FROM user_tokens t "
            "JOIN users u ON u.name = t.user_name WHERE t.token_hash = ? AND t.revoked_at IS NULL "
            "AND u.disabled_at IS NULL",
            (_hash(token),),
        )
        if row is None:
            return None
        now = time.time()
        if row["token_used"] is None or row["token_used"] < now - _TOUCH_SECONDS:
            with contextlib.suppress(Exception):  # bookkeeping: a busy store never refuses a valid token
                self._db.execute("UPDATE user_tokens SET last_used_at = ? WHERE id = ?", (now, row["token_id"]))
        return _user(row)

    # -- console sessions -----------------------------------------------------------------------------------

    def open_session(self, name: str, seconds: float) -> str:
        """A console session for this user, `seconds` long: its id (the cookie's value), shown this once."""
        session = SESSION_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        with self._db.write() as conn:
            conn.execute("DELETE FROM console_sessions WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT INTO console_sessions (id_hash, user_name, created_at, expires_at) VALUES (?, ?, ?, ?)",
                (_hash(session), name, now, now + seconds),
            )
        return session

    def session_user(self, session: str) -> User | None:
        """The live user of a console session, or None (unknown, expired, logged out, user disabled)."""
        if not session.startswith(SESSION_PREFIX) or len(session) > 200:
            return None
        row = self._db.query_one(
            "SELECT u.* FROM console_sessions s JOIN users u ON u.name = s.user_name "
            "WHERE s.id_hash = ? AND s.expires_at > ? AND u.disabled_at IS NULL",
            (_hash(session), time.time()),
        )
        return _user(row) if row is not None else None

    def close_session(self, session: str) -> None:
        self._db.execute("DELETE FROM console_sessions WHERE id_hash = ?", (_hash(session),))
