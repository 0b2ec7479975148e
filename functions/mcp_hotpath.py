"""POST /mcp served straight from ASGI, ahead of Litestar's routing, middleware, handler signature and response
layers: on an MCP `tools/call` they cost more of the mesh's CPU than the rest of the edge (issue 19).

It answers exactly as the Litestar route does (functions/mcp.py `post_reply` is the handler of both, and the
answer is sent as Litestar sends a `Response[bytes]`: the extra headers, then content-type and content-length).
Only the plain case is served here: anything the browser guard would refuse (functions/csrf.py `refusal`), a
body without a valid Content-Length or over the size cap, a request without Host: these go to Litestar, which
stays the route's owner (OpenAPI, DELETE, the 405s, the 413, the guard's JSON-RPC refusals)."""

from __future__ import annotations

import logging
from typing import Any

from flux7.shared.errors import Flux7Error
from flux7.shared.resource_metadata import base_url

from .csrf import refusal
from .mcp import McpRequest, post_reply
from .raw_asgi import INTERNAL, TOO_LARGE, BodyTooLarge, RawRoute, header_dict, read_body, send_error, send_json

__all__ = ["McpHotPath"]

log = logging.getLogger("flux7.http")


class McpHotPath(RawRoute):
    """POST /mcp."""

    @staticmethod
    def serves(scope: Any) -> bool:
        return scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/mcp"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> bool:
        """Answer the request; False (nothing read, nothing sent) when Litestar should have it instead."""
        headers = header_dict(scope["headers"])
        length = headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > self.max_body or "host" not in headers:
            return False
        client = scope.get("client")
        if refusal("POST", "/mcp", headers, str(client[0]) if client else "", self.allowed) is not None:
            return False  # the guard answers it (and logs it), as JSON-RPC
        try:
            raw = await read_body(receive, int(length), self.max_body)
        except BodyTooLarge:  # more than Content-Length said: Litestar's cap refuses it too
            await send_json(send, 413, TOO_LARGE, None)
            return True
        if raw is None:
            return True  # nobody to answer
        req = McpRequest(self.mesh, headers, lambda: _base(self.mesh, scope, headers))
        try:
            status, body, extra = await post_reply(req, raw)
        except Flux7Error as e:
            await send_error(send, e)
            return True
        except Exception:
            log.exception("unhandled error on POST /mcp")
            await send_json(send, 500, INTERNAL, None)
            return True
        await send_json(send, status, body, extra)
        return True


def _base(mesh: Any, scope: Any, headers: dict[str, str]) -> str:
    """functions/wellknown.py `public_base` from the scope (the request has a Host: the hot path requires it)."""
    return base_url(
        mesh.settings, str(scope.get("scheme") or "http"), headers["host"], headers.get("x-forwarded-proto")
    )
