"""Where an OAuth client may have its codes sent (shared/auth/oauth_clients.py registers clients): HTTPS, plain HTTP
to a loopback address (a native client's own callback, RFC 8252 section 7.3), or a desktop app's own scheme (RFC
8252 section 7.1: `cursor://anysphere.cursor-mcp/oauth/callback`), named in `oauth.redirect_schemes` or in reverse
domain form (`com.example.app://…`). Whoever else claims an app's scheme on that machine still cannot use the code:
every client proves its PKCE verifier. Never a scheme the browser handles itself (`javascript:`, `data:`, …)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

__all__ = ["APP_SCHEMES", "app_scheme_problem", "redirect_target", "redirect_uri_problem"]

_MAX_URI = 2000
_PRINTABLE = re.compile(r"[\x21-\x7e]+")  # RFC 6749 URIs in errors and parameters: visible ASCII only
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
# Schemes a browser or the system handles itself: never an app's callback, whatever the configuration says.
BROWSER_SCHEMES = frozenset(
    {
        "http",
        "https",
        "javascript",
        "data",
        "file",
        "blob",
        "about",
        "vbscript",
        "filesystem",
        "ftp",
        "ws",
        "wss",
        "mailto",
        "tel",
        "sms",
        "intent",
        "view-source",
        "chrome",
        "chrome-extension",
        "moz-extension",
        "resource",
    }
)
APP_SCHEMES = ("cursor",)  # oauth.redirect_schemes' default: Cursor registers cursor://anysphere.cursor-mcp/…


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def app_scheme_problem(scheme: str) -> str:
    """Why `scheme` may not be a desktop app's redirect scheme (`oauth.redirect_schemes`), or "" when it may."""
    if not _SCHEME.fullmatch(scheme):
        return "a scheme is lower-case letters, digits, '+', '-' and '.', starting with a letter"
    if scheme in BROWSER_SCHEMES:
        return f"{scheme}: is handled by the browser, not by an app"
    return ""


def redirect_uri_problem(uri: Any, app_schemes: tuple[str, ...] = APP_SCHEMES) -> str:
    """Why a redirect URI may not be registered, or "" when it may: an absolute HTTPS URI, HTTP to a loopback
    address, or an app's own scheme with an authority (`app_schemes`, or a reverse-domain scheme), without a
    fragment (OAuth 2.1 section 2.3.1, RFC 8252 sections 7.1 and 7.3)."""
    if not isinstance(uri, str) or not uri:
        return "a redirect URI is a non-empty string"
    if len(uri) > _MAX_URI or not _PRINTABLE.fullmatch(uri):
        return f"a redirect URI is at most {_MAX_URI} visible ASCII characters"
    try:
        parts = urlsplit(uri)
        host = parts.hostname or ""
    except ValueError:
        return "not a URI"
    if parts.fragment or "#" in uri:
        return "a redirect URI has no fragment"
    if parts.scheme == "https" and host:
        return ""
    if parts.scheme == "http" and _loopback(host):
        return ""
    app = parts.scheme in app_schemes or "." in parts.scheme
    if app and not app_scheme_problem(parts.scheme) and parts.netloc:
        return ""
    return (
        "a redirect URI is https://, http:// to a loopback address (127.0.0.1, [::1], localhost), or an app's own "
        f"scheme with a host ({', '.join(f'{s}://' for s in app_schemes) or 'none allowed'}, or a reverse-domain "
        "scheme like com.example.app://; oauth.redirect_schemes names more)"
    )


def redirect_target(uri: str) -> str:
    """Where a redirect URI sends the browser, as a person reads it: the host for the web (`claude.ai`,
    `127.0.0.1:5555`), the app and its host for an app's scheme (`cursor://anysphere.cursor-mcp`)."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        return parts.netloc
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme else ""
