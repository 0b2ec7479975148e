"""Single sign-on for the console: OpenID Connect's authorization code flow with PKCE, through authlib's client.

`begin` asks authlib for the provider's authorization URL (the provider found by discovery from the issuer; the
state, the nonce and an S256 code challenge made by authlib) and keeps a hash of the state, the nonce and the
code verifier in the database for ten minutes: the browser carries only the state (in a cookie and through the
provider's redirect), so any worker or instance can finish the login, and a state is good once. `finish` takes
that row, exchanges the code (with the verifier), has authlib verify the ID token (its signature against the
provider's JWKS, the issuer, the audience - our client id -, the nonce, the expiry), maps the role claim to a
flux7 role (docs/security.md "Single sign-on") and opens a console session."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec

from flux7.shared.auth.users import User, UserStore, validate_name
from flux7.shared.errors import BadRequest, Flux7Error, Forbidden
from flux7.shared.settings import OidcRole, OidcSettings, Settings
from flux7.shared.store.db import Database

__all__ = [
    "LOGIN_SECONDS",
    "LoginFailed",
    "LoginRefused",
    "ProviderUnavailable",
    "SingleSignOn",
    "SsoIdentity",
    "Started",
    "identity_from_claims",
    "single_sign_on",
]

log = logging.getLogger("flux7.sso")

LOGIN_SECONDS = 600  # from the redirect to the provider until its answer comes back
_RANK = {"viewer": 0, "approver": 1, "admin": 2, "owner": 3}


class LoginFailed(BadRequest):
    """The login cannot be trusted: an unknown, expired or mismatched state, an ID token that does not verify,
    the provider's own error. Nothing was opened."""


class LoginRefused(Forbidden):
    """The provider vouched for the user, but flux7 gives them nothing: no role maps, a disabled user, a name
    flux7 cannot use."""


class ProviderUnavailable(Flux7Error):
    status_code = 502


class SsoIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who the ID token names, in flux7's terms."""

    name: str
    role: str
    email: str = ""
    approve_tools: tuple[str, ...] = ()
    approve_agents: tuple[str, ...] = ()


class Started(msgspec.Struct, frozen=True):
    url: str  # the provider's authorization URL, with state, nonce and code challenge
    state: str  # the browser keeps it (a cookie) to prove at the callback that it started this login


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A dotted path into the claims (`realm_access.roles`); a claim whose own name has dots is found too."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _values(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _merged(globs: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Scopes of several matching grants: an unscoped one (any) wins, else their union in order."""
    if any(not g for g in globs):
        return ()
    return tuple(dict.fromkeys(g for group in globs for g in group))


def identity_from_claims(config: OidcSettings, claims: dict[str, Any]) -> SsoIdentity:
    """The flux7 user an ID token's claims make: its name (`name_claim`, else preferred_username, else email,
    lower-cased), and the highest role its `role_claim` values map to through `roles` (an approver's scopes
    merged over the values that give it), else `default_role`. LoginRefused when no role maps or the name
    does not fit flux7's user names."""
    email = claims.get("email") if isinstance(claims.get("email"), str) else ""
    paths = [config.name_claim] if config.name_claim else ["preferred_username", "email"]
    raw = next((v for p in paths if isinstance(v := _claim(claims, p), str) and v.strip()), "")
    if not raw:
        raise LoginRefused(f"the provider's ID token has no {' or '.join(paths)} claim to name the user by")
    name = raw.strip().lower()
    try:
        validate_name(name)
    except BadRequest as e:
        raise LoginRefused(f"the provider names this user {raw!r}, which is not a flux7 user name: {e}") from None
    values = _values(_claim(claims, config.role_claim))
    grants = [config.roles[v] for v in values if v in config.roles]
    found = [g if isinstance(g, OidcRole) else OidcRole(role=g) for g in grants]
    if not found and config.default_role:
        found = [OidcRole(role=config.default_role)]
    if not found:
        shown = ", ".join(values) if values else "none"
        raise LoginRefused(
            f"{name} has no flux7 role: their {config.role_claim!r} claim ({shown}) maps to none in "
            "auth.oidc.roles, and there is no default_role"
        )
    role = max((g.role for g in found), key=_RANK.__getitem__)
    approvers = [g for g in found if g.role == "approver"] if role == "approver" else []
    return SsoIdentity(
        name=name,
        role=role,
        email=email or "",
        approve_tools=_merged([g.approve_tools for g in approvers]) if approvers else (),
        approve_agents=_merged([g.approve_agents for g in approvers]) if approvers else (),
    )


def _authlib() -> tuple[Any, type[Exception], type[Exception], tuple[type[Exception], ...]]:
    """authlib's framework-free OAuth 2 / OpenID Connect client app over httpx (what its Starlette integration builds
    on; the login state lives in our database instead of a framework session), its errors, and the network errors
    of the HTTP library it runs on (httpx2 where installed, else httpx). Imported when single sign-on is configured:
    a server without it never loads authlib."""
    from authlib.integrations.base_client import BaseApp, OAuthError
    from authlib.integrations.base_client.async_app import AsyncOAuth2Mixin
    from authlib.integrations.base_client.async_openid import AsyncOpenIDMixin
    from authlib.integrations.httpx_client import AsyncOAuth2Client
    from joserfc.errors import JoseError

    network: tuple[type[Exception], ...] = (httpx.HTTPError, OSError, ValueError)
    try:
        import httpx2

        network = (*network, httpx2.HTTPError)
    except ImportError:  # pragma: no cover - httpx2 comes with the mcp SDK
        pass

    class Provider(AsyncOAuth2Mixin, AsyncOpenIDMixin, BaseApp):
        client_cls = AsyncOAuth2Client

    return Provider, OAuthError, JoseError, network


def _hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class SingleSignOn:
    def __init__(self, config: OidcSettings, db: Database, users: UserStore, session_seconds: float) -> None:
        self.config = config
        self.issuer = config.issuer.rstrip("/")
        self.session_seconds = session_seconds
        self._db = db
        self._users = users
        provider, self._oauth_error, self._jose_error, self._network = _authlib()
        self._keys_unreadable: tuple[type[Exception], ...] = (*self._network, RuntimeError)  # RuntimeError: no jwks_uri
        self._provider = provider(
            framework=None,
            name="oidc",
            client_id=config.client_id,
            client_secret=config.client_secret or None,
            server_metadata_url=f"{self.issuer}/.well-known/openid-configuration",
            client_kwargs={
                "scope": " ".join(config.scopes),
                "code_challenge_method": "S256",
                "token_endpoint_auth_method": "client_secret_basic" if config.client_secret else "none",
                "timeout": 10.0,
            },
        )

    @property
    def label(self) -> str:
        return self.config.label or urlsplit(self.issuer).hostname or self.issuer

    async def _metadata(self) -> dict[str, Any]:
        try:
            metadata: dict[str, Any] = await self._provider.load_server_metadata()
        except self._network as e:
            raise ProviderUnavailable(f"the identity provider's discovery document cannot be read: {e}") from None
        issuer = str(metadata.get("issuer", ""))
        if issuer.rstrip("/") != self.issuer:
            raise ProviderUnavailable(
                f"the identity provider calls itself {issuer!r}, not the configured issuer {self.config.issuer!r}"
            )
        return metadata

    async def begin(self, redirect_uri: str) -> Started:
        """The provider's authorization URL for one login; its state, nonce and code verifier are kept."""
        await self._metadata()
        made = await self._provider.create_authorization_url(redirect_uri)
        now = time.time()
        with self._db.write() as conn:
            conn.execute("DELETE FROM login_states WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT INTO login_states (state_hash, nonce, code_verifier, redirect_uri, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (_hash(made["state"]), made["nonce"], made["code_verifier"], redirect_uri, now, now + LOGIN_SECONDS),
            )
        return Started(url=made["url"], state=made["state"])

    def _take(self, state: str) -> tuple[str, str, str]:
        """(nonce, code_verifier, redirect_uri) of a login begun here, deleted as it is read: a state is good once."""
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT nonce, code_verifier, redirect_uri, expires_at FROM login_states WHERE state_hash = ?",
                (_hash(state),),
            ).fetchone()
            if row is None:
                raise LoginFailed("this sign-in was not started here, or was used already: start again")
            conn.execute("DELETE FROM login_states WHERE state_hash = ?", (_hash(state),))
        if float(row["expires_at"]) <= time.time():
            raise LoginFailed("this sign-in took longer than ten minutes: start again")
        return str(row["nonce"]), str(row["code_verifier"]), str(row["redirect_uri"])

    async def finish(self, query: dict[str, str], browser_state: str) -> tuple[User, str]:
        """The provider's answer (the callback's query) for the browser that holds `browser_state`: the user it
        signs in and a new console session (the cookie's value)."""
        state = query.get("state", "")
        if not state or not browser_state or not hmac.compare_digest(state.encode(), browser_state.encode()):
            raise LoginFailed("the sign-in's state does not match this browser's: start again from the console")
        nonce, verifier, redirect_uri = self._take(state)
        if query.get("error"):
            raise LoginFailed(f"the identity provider refused: {query['error']} {query.get('error_description', '')}")
        code = query.get("code", "")
        if not code:
            raise LoginFailed("the identity provider sent no authorization code")
        metadata = await self._metadata()
        try:
            token = await self._provider.fetch_access_token(
                redirect_uri=redirect_uri, code=code, code_verifier=verifier
            )
        except self._oauth_error as e:
            why = f"{getattr(e, 'error', '')} {getattr(e, 'description', '') or ''}".strip()
            raise LoginFailed(f"the identity provider refused the code: {why}") from None
        except self._network as e:
            raise ProviderUnavailable(f"the identity provider's token endpoint failed: {e}") from None
        if "id_token" not in token:
            raise LoginFailed("the identity provider sent no ID token (is `openid` among auth.oidc.scopes?)")
        options = {
            "iss": {"essential": True, "value": str(metadata["issuer"])},
            "aud": {"essential": True, "value": self.config.client_id},
            "sub": {"essential": True},
            "exp": {"essential": True},
        }
        try:
            claims = await self._provider.parse_id_token(token, nonce=nonce, claims_options=options, leeway=60)
        except self._jose_error as e:
            raise LoginFailed(f"the ID token does not verify: {e}") from None
        except self._keys_unreadable as e:
            raise ProviderUnavailable(f"the identity provider's keys cannot be read: {e}") from None
        who = identity_from_claims(self.config, dict(claims))
        user = self._users.upsert_sso(
            who.name, who.role, who.email, approve_tools=who.approve_tools, approve_agents=who.approve_agents
        )
        if user.disabled_at is not None:
            raise LoginRefused(f"user {user.name!r} is disabled in flux7")
        log.info("single sign-on: %s (%s)", user.actor, user.role)
        return user, self._users.open_session(user.name, self.session_seconds)


def single_sign_on(settings: Settings, db: Database, users: UserStore) -> SingleSignOn | None:
    """The console's single sign-on when `auth.oidc` is configured, else None."""
    oidc = settings.auth.oidc
    if oidc is None:
        return None
    return SingleSignOn(oidc, db, users, settings.auth.session_hours * 3600)
