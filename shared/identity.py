"""Who is calling: data-plane identity from the bearer (CONTRACT 1.5) and the control-plane gate (DESIGN 6)."""

from __future__ import annotations

import hmac
import ipaddress
import threading
import time
from typing import Any

import jwt
import msgspec

from .errors import Unauthorized
from .settings import Settings
from .tokens import TokenStore, looks_like_agent_token

__all__ = ["Caller", "IdentityResolver", "accepted_identities", "claims_allowed", "is_loopback", "is_loopback_bind"]


class Caller(msgspec.Struct, frozen=True):
    agent_id: str
    user_id: str = ""
    authenticated: bool = False  # presented a credential (a claim, an agent token or a JWT), not anonymous
    via_jwt: bool = False
    via_token: bool = False  # a per-agent token from the token store (shared/tokens.py)

    @property
    def verified(self) -> bool:
        """The identity was proven (agent token or JWT), not merely claimed."""
        return self.via_jwt or self.via_token


ANONYMOUS = Caller(agent_id="anonymous")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def is_loopback_bind(host: str) -> bool:
    return host == "localhost" or is_loopback(host)


# --- data-plane caller resolution: agent tokens, claims off loopback (issue 13 item 5) ---


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
    def __init__(self, settings: Settings, tokens: TokenStore | None = None) -> None:
        self._settings = settings
        self._tokens = tokens
        self.claims_allowed = claims_allowed(settings)
        jwt_cfg = settings.auth.jwt
        self._jwks = _Jwks(jwt_cfg.jwks_url) if jwt_cfg and jwt_cfg.jwks_url else None
        # -- admin token (issue 13 item 2): configured, else the generated file's; empty only in open_loopback
        from .admin_token import effective_admin_token

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
        if looks_like_agent_token(token):
            record = self._tokens.authenticate(token) if self._tokens is not None else None
            if record is None:
                raise Unauthorized("authentication required: unknown, revoked or expired agent token")
            return Caller(agent_id=record.agent_id, authenticated=True, via_token=True)
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
            token = (authorization or "").strip()
            if token.lower().startswith("bearer "):
                token = token[7:].strip()
            return hmac.compare_digest(token.encode(), self._admin_token)
        return is_loopback(peer)
