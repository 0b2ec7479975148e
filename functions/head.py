"""HEAD for every GET route, in one place (RFC 9110 9.3.2): the request runs as GET and the answer keeps its
status and headers (Content-Length and Content-Type included) without the body. Uptime checks and CDNs ask
HEAD; Litestar answers 405 for it unless each handler lists it. A route that has no GET answers HEAD as it
answers GET: 405 with its Allow header, or 404."""

from __future__ import annotations

from typing import Any

from litestar import Litestar

__all__ = ["HeadAsGet"]

_DISCONNECT = {"type": "http.disconnect"}


class HeadAsGet(Litestar):
    """The Litestar app, answering HEAD as GET without the body (also under TestClient: it is the app)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await super().__call__(scope, receive, send)
            return
        started = False
        finished = False

        async def head_send(message: Any) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
                await send(message)
            elif message["type"] == "http.response.body" and not finished:
                finished = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def head_receive() -> Any:
            # Once the head is out, a streaming GET (SSE) hears a disconnect and stops producing a body.
            return _DISCONNECT if finished or started else await receive()

        as_get: Any = {**scope, "method": "GET"}
        await super().__call__(as_get, head_receive, head_send)
