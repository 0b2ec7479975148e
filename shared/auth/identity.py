"""Who is calling: data-plane identity from the bearer, and control-plane principals (docs/security.md)."""

from __future__ import annotations

import hmac
import threading
import time
from typing import Any, Literal

import jwt
import msgspec

from flux7.shared.auth.admin_token import effective_admin_token
from flux7.shared.auth.loopback import is_loopback, is_loopback_bind
from flux7.shared.auth.oauth_connections import ACCESS_PREFIX, ConnectionStore, looks_like_oauth_token
from flux7.shared.auth.tokens import TokenStore, looks_like_agent_token
from flux7.shared.auth.users import User, UserStore, looks_like_user_token
from flux7.shared.errors import Unauthorized
from flux7.shared.globs import glob_match
from flux7.shared.settings import Settings

__all__ = [
    "OWNER",
    "Caller",
    "IdentityResolver",
    "Principal",
    "accepted_identities",
    "claims_allowed",
    "is_loopback",
    "is_loopback_bind",
    "user_principal",
]


class Caller(msgspec.Struct, frozen=True):
    agent_id: str
    user_id: str = ""
    authenticated: bool = False  # presented a credential (a claim, an agent token or a JWT), not anonymous
    via_jwt: bool = False
    via_token: bool = False  # a per-agent token from the token store (shared/auth/tokens.py)

    @property
    def verified(self) -> bool:
        """The identity was proven (agent token or JWT), not merely claimed."""
        return self.via_jwt or self.via_token


ANONYMOUS = Caller(agent_id="anonymous")


PrincipalKind = Literal["owner", "user", "supervisor", "loopback"]
# What a principal may do on the control plane (shared/auth/users.py for the roles).
PrincipalRole = Literal["owner", "admin", "approver", "viewer", "supervisor"]


class Principal(msgspec.Struct, frozen=True):
    """Who acts on the control plane, as its credential proves it: the admin token is the bootstrap owner; a user
    (personal token or console session) has a role; a supervisor is an agent token or JWT whose agent matches
    `supervisor.supervisor_agents`; `loopback` is a caller believed for being local, only with
    `auth.open_loopback` (the reference's trust mode, which trusts it as an owner)."""

    kind: PrincipalKind
    name: str
    role: PrincipalRole = "owner"
    approve_tools: tuple[str, ...] = ()  # an approver's scope (globs; empty: any)
    approve_agents: tuple[str, ...] = ()

    @property
    def actor(self) -> str:
        """How decisions and events name this principal: `owner:admin-token`, `user:<name>`,
        `supervisor:<id>`, `loopback:<claimed agent or anonymous>`."""
        return f"{self.kind}:{self.name}"

    @property
    def agent_id(self) -> str:
        """The agent identity the principal holds, which never settles its own approvals ("" for humans)."""
        return "" if self.kind in ("owner", "user") or self.name == "anonymous" else self.name

    @property
    def human(self) -> bool:
        return self.kind in ("owner", "user", "loopback")

    @property
    def reads(self) -> bool:
        """May read the control plane (traces, approvals, grants, policies, settings)."""
        return self.role != "supervisor"

    @property
    def writes(self) -> bool:
        """May change the control plane (policies, halts, grants, tokens, catalog, settings)."""
        return self.role in ("owner", "admin")

    @property
    def manages_users(self) -> bool:
        return self.role == "owner"

    def may_decide(self, tool: str, agent: str) -> bool:
        """Whether this principal may resolve an approval of `agent` calling `tool`, or grant it."""
        if self.role in ("owner", "admin", "supervisor"):
            return True
        if self.role != "approver":
            return False
        tools_ok = not self.approve_tools or any(glob_match(p, tool) for p in self.approve_tools)
        agents_ok = not self.approve_agents or any(glob_match(p, agent) for p in self.approve_agents)
        return tools_ok and agents_ok

    def resolution(self, claimed: str) -> tuple[str, str]:
        """(resolved_by, note) for a decision this principal makes whose request body said `claimed`. The
        resolver comes from the credential; what the body says is kept as a note. In the open-loopback trust
        mode there is no credential, so the claim (or `loopback:<agent>`) is all there is to record."""
        claimed = claimed.strip()
        if self.kind == "loopback":
            return claimed or self.actor, ""
        return self.actor, claimed if claimed and claimed != self.actor else ""


def user_principal(user: User) -> Principal:
    return Principal("user", user.name, user.role, user.approve_tools, user.approve_agents)


OWNER = Principal("owner", "admin-token")


def _bearer(authorization: str | None) -> str:
    token = (authorization or "").strip()
    return token[7:].strip() if token.lower().startswith("bearer ") else token


# --- data-plane caller resolution: agent tokens, claims off loopback (docs/security.md) ---


def claims_allowed(settings: Settings) -> bool:
    """Whether bare `agent:<id>` claims and anonymous calls are believed: `auth.allow_claimed_identity`, by
    default only when the server is bound to loopback (where every caller is a local process anyway)."""
    explicit = settings.auth.allow_claimed_identity
    return is_loopback_bind(settings.host) if explicit is None else explicit


def accepted_identities(settings: Settings) -> str:
    """The start-up line's account of which identities the data plane accepts."""
    jwt_cfg = settings.auth.jwt
    claims = claims_allowed(settings) and (jwt_cfg is None or jwt_cfg.allow_legacy)
    anonymous = claims_allowed(settings) and not settings.auth.require_authentication
    issuer = (jwt_cfg.issuer or jwt_cfg.jwks_url) if jwt_cfg else ""
    return (
        "identities: agent tokens yes"
        f", JWT {'from ' + issuer if issuer else 'no'}"
        f", claimed agent ids {'yes' if claims else 'no'}"
        f", anonymous {'yes' if anonymous else 'no'}"
    )


# --- end of data-plane caller resolution helpers ---


class _Jwks:
    """A JWKS fetched from jwks_url, refreshed at most every 5 minutes (and on an unknown kid)."""

    def __init__(self, url: str) -> None:
        self._client = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=5)
        self._lock = threading.Lock()

    def key_for(self, token: str) -> Any:
        with self._lock:
            return self._client.get_signing_key_from_jwt(token).key


class IdentityResolver:
    def __init__(
        self,
        settings: Settings,
        tokens: TokenStore | None = None,
        users: UserStore | None = None,
        oauth: ConnectionStore | None = None,
    ) -> None:
        self._settings = settings
        self._tokens = tokens
        self._users = users
        self._oauth = oauth  # None: OAuth off (oauth.enabled: false), its tokens refused
        self.claims_allowed = claims_allowed(settings)
        jwt_cfg = settings.auth.jwt
        self._jwks = _Jwks(jwt_cfg.jwks_url) if jwt_cfg and jwt_cfg.jwks_url else None
        # the admin token: configured, else the generated file's; empty only in open_loopback
        self._admin_token = effective_admin_token(settings).encode()
        # -- end admin token
        self._cache: dict[str, tuple[float, Caller]] = {}

    def caller(self, authorization: str | None) -> Caller:
        """Data-plane identity. Raises Unauthorized per CONTRACT 1.5."""
        token = (authorization or "").strip()
        if token.lower().startswith("bearer "):
            token = token[7:].strip()
        if not token:
            return ANONYMOUS
        if looks_like_user_token(token):
            raise Unauthorized("a personal token (f7u_…) names a person, not an agent: agents use f7a_ tokens or JWTs")
        if looks_like_agent_token(token):
            record = self._tokens.authenticate(token) if self._tokens is not None else None
            if record is None:
                raise Unauthorized("authentication required: unknown, revoked or expired agent token")
            return Caller(agent_id=record.agent_id, authenticated=True, via_token=True)
        if looks_like_oauth_token(token):
            return self._oauth_caller(token)
        jwt_cfg = self._settings.auth.jwt
        if jwt_cfg is None:
            agent = token[len("agent:") :] if token.startswith("agent:") else token
            return Caller(agent_id=agent or "anonymous", authenticated=bool(agent))
        if token.startswith("agent:"):
            if jwt_cfg.allow_legacy:
                return Caller(agent_id=token[6:] or "anonymous", authenticated=bool(token[6:]))
            raise Unauthorized("authentication required: present a valid JWT")
        if token.count(".") != 2:
            raise Unauthorized("authentication required: present a valid JWT")
        return self._verify_jwt(token)

    def _oauth_caller(self, token: str) -> Caller:
        """An OAuth access token (shared/auth/oauth.py) is the agent a human consented to, nothing more: never a
        supervisor (a token whose agent became one stops working), and bound to this server's MCP URL."""
        if not token.startswith(ACCESS_PREFIX):
            raise Unauthorized("a refresh token (f7r_…) is not an access token: exchange it at /oauth/token")
        record = self._oauth.authenticate(token) if self._oauth is not None else None
        if record is None:
            raise Unauthorized("authentication required: unknown, revoked or expired OAuth token")
        if any(glob_match(p, record.agent_id) for p in self._settings.supervisor.supervisor_agents):
            raise Unauthorized("an OAuth connection never acts as a supervisor agent")
        audience = self._settings.auth.resource_url.rstrip("/")
        if audience and record.resource.rstrip("/") != f"{audience}/mcp":
            raise Unauthorized(f"the OAuth token was issued for {record.resource}, not for this server")
        return Caller(agent_id=record.agent_id, authenticated=True, via_token=True)

    def _verify_jwt(self, token: str) -> Caller:
        now = time.monotonic()
        hit = self._cache.get(token)
        if hit and hit[0] > now:
            return hit[1]
        jwt_cfg = self._settings.auth.jwt
        assert jwt_cfg is not None and self._jwks is not None
        try:
            key = self._jwks.key_for(token)
            claims = jwt.decode(
                token,
                key=key,
                algorithms=["RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA"],
                audience=jwt_cfg.audience or None,
                issuer=jwt_cfg.issuer or None,
                options={"verify_aud": bool(jwt_cfg.audience), "require": ["exp"]},
            )
        except (jwt.PyJWTError, OSError) as e:
            raise Unauthorized(f"authentication required: invalid JWT ({e})") from None
        agent = str(claims.get(jwt_cfg.agent_claim) or "")
        if not agent:
            raise Unauthorized(f"authentication required: JWT lacks the {jwt_cfg.agent_claim!r} claim")
        user = str(claims.get(jwt_cfg.user_claim) or "") if jwt_cfg.user_claim else ""
        caller = Caller(agent_id=agent, user_id=user, authenticated=True, via_jwt=True)
        exp = float(claims.get("exp", 0))
        if len(self._cache) > 10000:
            self._cache.clear()
        self._cache[token] = (now + max(0.0, min(60.0, exp - time.time())), caller)
        return caller

    def require(self, caller: Caller) -> Caller:
        """The data plane's gate: off loopback (unless `allow_claimed_identity`) only proven identities pass;
        with `require_authentication` anonymous callers are refused."""
        if caller.verified:
            return caller
        if not self.claims_allowed:
            raise Unauthorized(
                "authentication required: this server accepts agent tokens (flux7 token issue) or JWTs, "
                "not claimed agent ids or anonymous calls"
            )
        if self._settings.auth.require_authentication and not caller.authenticated:
            raise Unauthorized("authentication required")
        return caller

    def is_admin(self, authorization: str | None, peer: str | None) -> bool:
        """Control plane: the admin token (constant time) when set; otherwise loopback peers only."""
        if self._admin_token:
            return self.holds_admin_token(authorization)
        return is_loopback(peer)

    def holds_admin_token(self, authorization: str | None) -> bool:
        """The request presents the admin token itself (never true in the open-loopback mode, which has none)."""
        if not self._admin_token:
            return False
        return hmac.compare_digest(_bearer(authorization).encode(), self._admin_token)

    def is_supervisor(self, caller: Caller) -> bool:
        """Supervisor rights (the MCP `approval.*` and `grant.*` tools, resolving approvals over REST): an agent
        matching `supervisor.supervisor_agents` whose identity is proven by an agent token or a JWT. A claimed id
        is believed only in the open-loopback trust mode, which believes every claim."""
        if not (caller.verified or (self._settings.auth.open_loopback and caller.authenticated)):
            return False
        return any(glob_match(p, caller.agent_id) for p in self._settings.supervisor.supervisor_agents)

    def principal(self, authorization: str | None, peer: str | None, session: str = "") -> Principal | None:
        """The control-plane principal a request's credential proves, or None for no control-plane rights:
        the admin token, a user's personal token or console session (`session`: the cookie's value), a
        supervisor's agent token or JWT, or (open loopback only) any local caller. A bad credential (a revoked
        token, an invalid JWT) proves nothing: None, not an error."""
        bearer = _bearer(authorization)
        if self._users is not None and looks_like_user_token(bearer):
            user = self._users.authenticate(bearer)
            return user_principal(user) if user is not None else None
        if self._users is not None and session and not bearer:  # a bearer, when sent, speaks for the request
            user = self._users.session_user(session)
            if user is not None:
                return user_principal(user)
        if self._admin_token:
            if self.holds_admin_token(authorization):
                return OWNER
        elif is_loopback(peer):  # open loopback: every local caller, named by its claim
            try:
                caller = self.caller(authorization)
            except Unauthorized:
                return None
            return Principal("loopback", caller.agent_id if caller.authenticated else "anonymous")
        if not authorization:
            return None
        try:
            caller = self.caller(authorization)
        except Unauthorized:
            return None
        if caller.verified and self.is_supervisor(caller):
            return Principal("supervisor", caller.agent_id, "supervisor")
        return None
