"""GET /.well-known/oauth-protected-resource (RFC 9728): where a standard MCP client learns how to get a token.
Served at the root and at the path-inserted form for /mcp (`…/oauth-protected-resource/mcp`) that MCP clients
also try."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get

from flux7.functions.auth import mesh_of
from flux7.functions.openapi import PUBLIC, ok
from flux7.functions.responses import json_response
from flux7.shared.auth.resource_metadata import WELL_KNOWN, base_url, protected_resource_metadata

__all__ = ["ROUTES", "public_base"]


def public_base(request: Request[Any, Any, Any]) -> str:
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    settings = mesh_of(request).settings
    return base_url(settings, request.url.scheme, host, request.headers.get("x-forwarded-proto"))


def _protected_resource(request: Request[Any, Any, Any]) -> Response[bytes]:
    doc = protected_resource_metadata(mesh_of(request).settings, public_base(request))
    return json_response(doc, headers={"Cache-Control": "max-age=300"})


def _at(path: str, operation_id: str) -> Any:
    """The document at one path. One handler per path: Litestar keeps a handler's paths in a set, so two paths on
    one handler came out of the OpenAPI document in an order that changed from one process to the next."""
    return get(
        path,
        sync_to_thread=False,
        tags=["meta"],
        security=PUBLIC,
        responses={200: ok(dict[str, Any], "RFC 9728 protected resource metadata")},
        operation_id=operation_id,
    )(_protected_resource)


protected_resource = _at(WELL_KNOWN, "WellKnownOauthProtectedResourceProtectedResource")
protected_resource_for_mcp = _at(WELL_KNOWN + "/mcp", "WellKnownOauthProtectedResourceMcpProtectedResource")


ROUTES = [protected_resource, protected_resource_for_mcp]
