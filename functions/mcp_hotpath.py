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

import msgspec

from flux7.shared.errors import Flux7Error
from flux7.shared.resource_metadata import base_url

from .csrf import refusal
from .mcp import McpRequest, post_reply
from .raw_headers import header_dict

__all__ = ["McpHotPath"]

log = logging.getLogger("flux7.http")

_JSON = (b"content-type", b"application/json")
_INTERNAL = msgspec.json.encode({"error": "internal error"})


class McpHotPath:
    """POST /mcp for an app whose console origins are `allowed_origins`."""

    def __init__(self, mesh: Any, max_body: int, allowed_origins: tuple[str, ...]) -> None:
        self.mesh = mesh
        self.max_body = max_body
        self.allowed = allowed_origins

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
        chunks: list[bytes] = []
        size, expected = 0, int(length)
        # Read until the declared length is in: granian hands the bytes over with more_body set and the (empty)
        # end of the body as a second event, each one a hop from its I/O thread to the event loop (as
        # functions/hotpath.py does). A declared empty body is not read at all.
        while size < expected:
            event = await receive()
            if event["type"] == "http.disconnect":
                return True  # nobody to answer
            chunk = event.get("body", b"")
            if chunk:
                size += len(chunk)
                chunks.append(chunk)
            if not event.get("more_body", False):
                break
        if size > self.max_body:  # more than Content-Length said: Litestar's cap refuses it too
            await _send(send, 413, msgspec.json.encode({"error": "request body too large"}), None)
            return True
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)  # b"" when nothing was read
        req = McpRequest(self.mesh, headers, lambda: _base(self.mesh, scope, headers))
        try:
            status, body, extra = await post_reply(req, raw)
        except Flux7Error as e:  # as functions/errors.py renders a typed error
            await _send(
                send,
                e.status_code,
                msgspec.json.encode(e.body()),
                {"Retry-After": "1"} if e.status_code == 503 else None,
            )
            return True
        except Exception:
            log.exception("unhandled error on POST /mcp")
            await _send(send, 500, _INTERNAL, None)
            return True
        await _send(send, status, body, extra)
        return True


def _base(mesh: Any, scope: Any, headers: dict[str, str]) -> str:
    """functions/wellknown.py `public_base` from the scope (the request has a Host: the hot path requires it)."""
    return base_url(
        mesh.settings, str(scope.get("scheme") or "http"), headers["host"], headers.get("x-forwarded-proto")
    )


async def _send(send: Any, status: int, body: bytes, extra: dict[str, str] | None) -> None:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()] if extra else []
    headers.append(_JSON)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
