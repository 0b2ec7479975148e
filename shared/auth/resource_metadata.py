"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for /mcp, as the MCP authorization spec has clients
discover where to get a token: named in `WWW-Authenticate: Bearer resource_metadata="…"` on a 401."""

from __future__ import annotations

from typing import Any

from flux7.shared.settings import Settings

__all__ = ["WELL_KNOWN", "base_url", "bearer_challenge", "protected_resource_metadata"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def base_url(settings: Settings, scheme: str, host: str, forwarded_proto: str | None = None) -> str:
    """The public base URL: `auth.resource_url` when set (a deployment behind a proxy should set it), else the
    scheme and Host the client used (`X-Forwarded-Proto: https` from a TLS-terminating proxy honoured)."""
    if settings.auth.resource_url:
        return settings.auth.resource_url.rstrip("/")
    if forwarded_proto and forwarded_proto.split(",")[0].strip().lower() == "https":
        scheme = "https"
    return f"{scheme}://{host}"


def protected_resource_metadata(settings: Settings, base: str) -> dict[str, Any]:
    """The document for the resource `<base>/mcp`. Its authorization servers: the configured JWT issuer, when
    there is one (first: a deployment with an identity provider keeps its clients going there), and this server
    itself unless `oauth.enabled` is false (shared/auth/oauth.py; its issuer is `<base>`). Agent tokens are
    issued out of band (`flux7 token issue`) and need no authorization server."""
    doc: dict[str, Any] = {"resource": f"{base}/mcp"}
    servers = []
    jwt_cfg = settings.auth.jwt
    if jwt_cfg is not None and jwt_cfg.issuer:
        servers.append(jwt_cfg.issuer)
    if settings.oauth.enabled:
        servers.append(base)
    if servers:
        doc["authorization_servers"] = servers
    if settings.oauth.enabled:
        doc["scopes_supported"] = ["mcp"]
    doc["bearer_methods_supported"] = ["header"]
    doc["resource_name"] = "flux7 mesh"
    return doc


def bearer_challenge(base: str, *, invalid_token: bool = False) -> str:
    """The `WWW-Authenticate` value of a 401 from /mcp (RFC 6750 section 3, RFC 9728 section 5.1)."""
    error = 'error="invalid_token", ' if invalid_token else ""
    return f'Bearer {error}resource_metadata="{base}{WELL_KNOWN}"'
