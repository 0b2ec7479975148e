"""Browser requests from other sites may not change anything (issue 13, item 2).

A web page can make the browser send a "simple" POST (text/plain, form, no-cors) to any origin without a
preflight, so the loopback server would act on it. Every state-changing request is checked once here, before
routing reaches a handler:

- `Sec-Fetch-Site: cross-site | same-site` is refused unless the `Origin` is one of `console.allowed_origins`
  (another port on the same loopback host is *same-site*: sites ignore ports);
- an `Origin`, when present, must be the server's own origin (scheme-less `host:port` equal to `Host`) or a
  listed one; a DNS name pointing at a loopback peer is not trusted as "own" (DNS rebinding) unless listed;
- a request with a body must say it is JSON (`application/json` or `…+json`), or it is 415; bodyless POSTs
  (approve, resume) pass. `/policy-files/*` also takes YAML text, so only the origin rules apply there.

Clients that are not browsers send neither header and are unaffected."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from litestar.datastructures import Headers
from litestar.enums import ScopeType
from litestar.middleware import DefineMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from flux7.functions.errors import JSONRPC_PATHS, guard_answer
from flux7.functions.responses import send_answer
from flux7.shared.errors import Flux7Error, Forbidden, UnsupportedMediaType

__all__ = ["browser_guard", "log_refusal", "origin_refusal", "refusal"]

log = logging.getLogger("flux7.http")

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Routes whose body may be something other than JSON (a policy file's YAML text).
_TEXT_BODY_PREFIXES = ("/policy-files/",)
# Slack's interaction callback is a form (`payload=<JSON>`) with no Origin; it is trusted only when Slack's
# signature verifies (functions/integrations.py), so only the JSON rule is lifted there, not the origin rules.
_FORM_BODY_PATHS = frozenset({"/integrations/slack/actions"})
# OAuth's endpoints for clients that are not browsers (functions/oauth.py). They act on no ambient credential (no
# cookie, no admin token), only on what the request carries (a code and its PKCE verifier, a refresh token, a token
# to revoke, metadata to register), so a page elsewhere gains nothing by sending them; and token and revoke take
# OAuth's form encoding. The consent (approve, deny) is not among them.
_NON_BROWSER_PATHS = frozenset({"/oauth/register", "/oauth/token", "/oauth/revoke"})


def _netloc(host: str, scheme: str = "") -> str:
    """`host[:port]`, lower-cased, with the scheme's default port dropped."""
    host = host.strip().lower()
    for default in ((":80",) if scheme != "https" else ()) + ((":443",) if scheme != "http" else ()):
        if host.endswith(default):
            return host[: -len(default)]
    return host


def _hostname(netloc: str) -> str:
    try:
        return urlsplit("//" + netloc).hostname or ""
    except ValueError:
        return ""


def _is_literal_or_localhost(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback_peer(peer: str) -> bool:
    try:
        return ipaddress.ip_address(peer.split("%")[0]).is_loopback
    except ValueError:
        return False


def _listed(origin: str, allowed: Iterable[str]) -> bool:
    allowed = tuple(allowed)
    return "*" in allowed or origin.rstrip("/") in {a.rstrip("/") for a in allowed}


def _own_origin(origin: str, host: str, peer: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc or not host:
        return False
    if _netloc(parts.netloc, parts.scheme) != _netloc(host, parts.scheme):
        return False
    # A page on evil.example whose name now resolves to 127.0.0.1 has Origin == Host: a name is only "own" when
    # the peer is not on loopback (a proxy or a real network), or the name is an address or `localhost`.
    return _is_literal_or_localhost(_hostname(_netloc(host))) or not _is_loopback_peer(peer)


def origin_refusal(headers: Mapping[str, str], peer: str, allowed: Iterable[str]) -> str:
    """Why a browser request from another site is refused, or "" when it may go on."""
    allowed = tuple(allowed)
    origin = headers.get("origin")
    site = (headers.get("sec-fetch-site") or "").strip().lower()
    if site in ("cross-site", "same-site") and not (origin and _listed(origin, allowed)):
        return f"cross-site request refused (Sec-Fetch-Site: {site}); list the origin in console.allowed_origins"
    if origin is None:
        return ""
    if _listed(origin, allowed) or _own_origin(origin, headers.get("host") or "", peer):
        return ""
    return f"origin not allowed: {origin}; list it in console.allowed_origins"


def _has_body(headers: Mapping[str, str]) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return headers.get("transfer-encoding") is not None


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def refusal(method: str, path: str, headers: Mapping[str, str], peer: str, allowed: Iterable[str]) -> Flux7Error | None:
    """The error a state-changing request gets before any handler runs, or None."""
    if method not in STATE_CHANGING or path in _NON_BROWSER_PATHS:
        return None
    reason = origin_refusal(headers, peer, allowed)
    if reason:
        return Forbidden(reason)
    if path.startswith(_TEXT_BODY_PREFIXES) or path in _FORM_BODY_PATHS or not _has_body(headers):
        return None
    if not _is_json(headers.get("content-type")):
        return UnsupportedMediaType("the body must be JSON (Content-Type: application/json)")
    return None


def log_refusal(method: str, path: str, peer: str, error: Flux7Error) -> None:
    log.warning("refused %s %s from %s: %s", method, path, peer, error.message)


class _BrowserGuard:
    def __init__(self, app: ASGIApp, allowed_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allowed = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            client = scope.get("client")
            peer = str(client[0]) if client else ""
            error = refusal(str(scope.get("method", "")), scope["path"], Headers.from_scope(scope), peer, self.allowed)
            if error is not None:
                log_refusal(str(scope.get("method")), scope["path"], peer, error)
                if scope["path"] in JSONRPC_PATHS:  # answered as the rest of their refusals are
                    await send_answer(send, guard_answer(scope["path"], error))
                    return
                raise error  # rendered by functions/errors.py like every other refusal
        await self.app(scope, receive, send)


def browser_guard(allowed_origins: Iterable[str]) -> DefineMiddleware:
    """The middleware for an app whose console origins are `allowed_origins`."""
    return DefineMiddleware(_BrowserGuard, allowed_origins=tuple(allowed_origins))
