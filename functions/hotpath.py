"""The governed call (POST /tool/{name}) served ahead of Litestar's routing, middleware, handler signature and
response layers, which cost more CPU than the rest of the edge (issue 19's profile): from granian's RSGI interface
under `flux7 serve` (functions/rsgi.py), from raw ASGI in process (functions/raw_asgi.py).

It answers exactly as the Litestar route does (functions/tools.py `governed_call` is the handler of both): the
browser guard first (functions/csrf.py `refusal`), the body size cap (413), typed errors rendered as in
functions/errors.py, unknown errors a logged 500. Anything unusual (a path Litestar would route otherwise, an
unparseable Content-Length, CORS configured) goes to Litestar, which stays the route's owner (OpenAPI, HEAD)."""

from __future__ import annotations

import logging

from flux7.functions.csrf import log_refusal, refusal
from flux7.functions.raw_asgi import GONE, INTERNAL, TOO_LARGE, Answer, BodyReader, BodyTooLarge, RawRoute, error_answer
from flux7.functions.tools import governed_call
from flux7.shared.errors import Flux7Error

__all__ = ["HotPath"]

log = logging.getLogger("flux7.http")

_PREFIX = "/tool/"
_AT = len(_PREFIX)  # where the tool name starts


class HotPath(RawRoute):
    """POST /tool/{name}."""

    @staticmethod
    def serves(path: str) -> bool:
        """Whether a POST to this path is a governed call: one non-empty path segment after /tool/."""
        return path.startswith(_PREFIX) and len(path) > _AT and "/" not in path[_AT:]

    async def answer(
        self, path: str, headers: dict[str, str], peer: str, scheme: str, read: BodyReader
    ) -> Answer | None:
        length = headers.get("content-length")
        if length is not None and not length.strip().isdigit():
            return None
        error = refusal("POST", path, headers, peer, self.allowed)
        if error is not None:
            log_refusal("POST", path, peer, error)
            return error_answer(error)
        expected = int(length) if length is not None else -1
        try:
            if expected > self.max_body:
                raise BodyTooLarge
            raw = await read(expected, self.max_body)
        except BodyTooLarge:
            return 413, TOO_LARGE, None
        if raw is None:
            return GONE
        try:
            return await governed_call(self.mesh, path[_AT:], raw, headers)
        except Flux7Error as e:
            return error_answer(e)
        except Exception:
            log.exception("unhandled error on POST %s", path)
            return 500, INTERNAL, None
