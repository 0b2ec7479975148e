"""The governed call (POST /tool/{name}) served straight from ASGI, ahead of Litestar's routing, middleware,
handler signature and response layers, which cost more CPU than the rest of the edge (issue 19's profile).

It answers exactly as the Litestar route does (functions/tools.py `governed_call` is the handler of both): the
browser guard first (functions/csrf.py `refusal`), the body size cap (413), typed errors rendered as in
functions/errors.py, unknown errors a logged 500. Anything unusual (a path Litestar would route otherwise, an
unparseable Content-Length, CORS configured) goes to Litestar, which stays the route's owner (OpenAPI, HEAD)."""

from __future__ import annotations

import logging
from typing import Any

from flux7.shared.errors import Flux7Error

from .csrf import log_refusal, refusal
from .raw_asgi import INTERNAL, TOO_LARGE, BodyTooLarge, RawRoute, header_dict, read_body, send_error, send_json
from .tools import governed_call

__all__ = ["HotPath"]

log = logging.getLogger("flux7.http")

_PREFIX = "/tool/"
_AT = len(_PREFIX)  # where the tool name starts


class HotPath(RawRoute):
    """POST /tool/{name}."""

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
            await send_error(send, error)
            return True
        expected = int(length) if length is not None else -1
        try:
            if expected > self.max_body:
                raise BodyTooLarge
            raw = await read_body(receive, expected, self.max_body)
        except BodyTooLarge:
            await send_json(send, 413, TOO_LARGE, None)
            return True
        if raw is None:
            return True  # nobody to answer
        try:
            status, body, extra = await governed_call(self.mesh, path[_AT:], raw, headers)
        except Flux7Error as e:
            await send_error(send, e)
            return True
        except Exception:
            log.exception("unhandled error on POST %s", path)
            await send_json(send, 500, INTERNAL, None)
            return True
        await send_json(send, status, body, extra)
        return True
