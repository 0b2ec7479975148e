"""GET /.well-known/oauth-protected-resource (RFC 9728): where a standard MCP client learns how to get a token.
Served at the root and at the path-inserted form for /mcp (`…/oauth-protected-resource/mcp`) that MCP clients
also try."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get

from flux7.shared.resource_metadata import WELL_KNOWN, base_url, protected_resource_metadata

from .auth import mesh_of
from .openapi import PUBLIC, ok

__all__ = ["ROUTES", "public_base"]


def public_base(request: Request[Any, Any, Any]) -> str:
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    settings = mesh_of(request).settings
    return base_url(settings, request.url.scheme, host, request.headers.get("x-forwarded-proto"))


@get(
    [WELL_KNOWN, WELL_KNOWN + "/mcp"],
    sync_to_thread=False,
    tags=["meta"],
    security=PUBLIC,
    responses={200: ok(dict[str, Any], "RFC 9728 protected resource metadata")},
)
def protected_resource(request: Request[Any, Any, Any]) -> Response[bytes]:
    doc = protected_resource_metadata(mesh_of(request).settings, public_base(request))
    return Response(msgspec.json.encode(doc), media_type="application/json", headers={"Cache-Control": "max-age=300"})


ROUTES = [protected_resource]
