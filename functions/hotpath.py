"""The governed call (POST /tool/{name}) served straight from ASGI, ahead of Litestar's routing, middleware,
handler signature and response layers, which cost more CPU than the rest of the edge (issue 19's profile).

It answers exactly as the Litestar route does (functions/tools.py `governed_call` is the handler of both): the
browser guard first (functions/csrf.py `refusal`), the body size cap (413), typed errors rendered as in
functions/errors.py, unknown errors a logged 500. Anything unusual (a path Litestar would route otherwise, an
unparseable Content-Length, CORS configured) goes to Litestar, which stays the route's owner (OpenAPI, HEAD)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from flux7.shared.errors import Flux7Error

from .csrf import log_refusal, refusal
from .raw_headers import header_dict
from .tools import governed_call

__all__ = ["HotPath"]

log = logging.getLogger("flux7.http")

_PREFIX = "/tool/"
_AT = len(_PREFIX)  # where the tool name starts
_JSON = (b"content-type", b"application/json")
_TOO_LARGE = msgspec.json.encode({"error": "request body too large"})
_INTERNAL = msgspec.json.encode({"error": "internal error"})


class HotPath:
    """POST /tool/{name} for an app whose console origins are `allowed_origins`."""

    def __init__(self, mesh: Any, max_body: int, allowed_origins: tuple[str, ...]) -> None:
        self.mesh = mesh
        self.max_body = max_body
        self.allowed = allowed_origins

    @staticmethod
    def serves(scope: Any) -> bool:
        """Whether this request is a governed call: one non-empty path segment after /tool/."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return False
        path: str = scope["path"]
        return path.startswith(_PREFIX) and len(path) > _AT and "/" not in path[_AT:]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> bool:
        """Answer the call; False (nothing read, nothing sent) when Litestar should have it instead."""
        headers = header_dict(scope["headers"])
        length = headers.get("content-length")
        if length is not None and not length.strip().isdigit():
            return False
        path: str = scope["path"]
        client = scope.get("client")
        peer = str(client[0]) if client else ""
        error = refusal("POST", path, headers, peer, self.allowed)
        if error is not None:
            log_refusal("POST", path, peer, error)
            await _error(send, error)
            return True
        expected = int(length) if length is not None else -1
        if expected > self.max_body:
            await _send(send, 413, _TOO_LARGE, None)
            return True
        chunks: list[bytes] = []
        size = 0
        # A body of a declared length is read once that many bytes are in: granian hands the bytes over with
        # more_body set and the (empty) end of the body as a second event, each one a hop from its I/O thread to
        # the event loop; the second carries nothing (issue 19, c=1). A declared empty body is not read at all.
        while size < expected or expected < 0:
            event = await receive()
            if event["type"] == "http.disconnect":
                return True  # nobody to answer
            chunk = event.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_body:
                    await _send(send, 413, _TOO_LARGE, None)
                    return True
                chunks.append(chunk)
            if not event.get("more_body", False):
                break
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            status, body, extra = await governed_call(self.mesh, path[_AT:], raw, headers)
        except Flux7Error as e:
            await _error(send, e)
            return True
        except Exception:
            log.exception("unhandled error on POST %s", path)
            await _send(send, 500, _INTERNAL, None)
            return True
        await _send(send, status, body, extra)
        return True


async def _error(send: Any, error: Flux7Error) -> None:
    # as functions/errors.py renders a typed error
    extra = {"Retry-After": "1"} if error.status_code == 503 else None
    await _send(send, error.status_code, msgspec.json.encode(error.body()), extra)


async def _send(send: Any, status: int, body: bytes, extra: dict[str, str] | None) -> None:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()] if extra else []
    headers.append(_JSON)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
