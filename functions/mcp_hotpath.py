"""POST /mcp served ahead of Litestar's routing, middleware, handler signature and response layers: on an MCP
`tools/call` they cost more of the mesh's CPU than the rest of the edge (issue 19). From granian's RSGI interface
under `flux7 serve` (functions/rsgi.py), from raw ASGI in process (functions/raw_asgi.py).

It answers exactly as the Litestar route does (functions/mcp.py `post_reply` is the handler of both, and the
answer is sent as Litestar sends a `Response[bytes]`: the extra headers, then content-type and content-length).
Only the plain case is served here: anything the browser guard would refuse (functions/csrf.py `refusal`), a
body without a valid Content-Length or over the size cap, a request without Host: these go to Litestar, which
stays the route's owner (OpenAPI, DELETE, the 405s, the 413, the guard's JSON-RPC refusals)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from flux7.functions.csrf import refusal
from flux7.functions.mcp import McpRequest, post_reply
from flux7.functions.raw_asgi import GONE, INTERNAL, TOO_LARGE, Answer, BodyReader, BodyTooLarge, RawRoute, error_answer
from flux7.shared.auth.resource_metadata import base_url
from flux7.shared.errors import Flux7Error

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["McpHotPath"]

log = logging.getLogger("flux7.http")


class McpHotPath(RawRoute):
    """POST /mcp."""

    async def answer(
        self, path: str, headers: dict[str, str], peer: str, scheme: str, read: BodyReader
    ) -> Answer | None:
        length = headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > self.max_body or "host" not in headers:
            return None
        if refusal("POST", "/mcp", headers, peer, self.allowed) is not None:
            return None  # the guard answers it (and logs it), as JSON-RPC
        try:
            raw = await read(int(length), self.max_body)
        except BodyTooLarge:  # more than Content-Length said: Litestar's cap refuses it too
            return 413, TOO_LARGE, None
        if raw is None:
            return GONE
        req = McpRequest(self.mesh, headers, lambda: _base(self.mesh, scheme, headers))
        try:
            return await post_reply(req, raw)
        except Flux7Error as e:
            return error_answer(e)
        except Exception:
            log.exception("unhandled error on POST /mcp")
            return 500, INTERNAL, None


def _base(mesh: Mesh, scheme: str, headers: dict[str, str]) -> str:
    """functions/wellknown.py `public_base` of the request (it has a Host: the hot path requires it)."""
    return base_url(mesh.settings, scheme, headers["host"], headers.get("x-forwarded-proto"))
