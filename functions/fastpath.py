"""The fast paths: routes answered ahead of Litestar's routing, middleware, handler signature and response layers,
which cost more CPU than the rest of the edge on a governed call (issue 19). One table says which (method and path
shape to handler, functions/app.py `FAST_PATHS`), and both carriers consult it: granian's RSGI interface under
`flux7 serve` (functions/rsgi.py) and raw ASGI in process (functions/raw_asgi.py). Each handler is also the body of
its Litestar route, which stays the route's owner (OpenAPI, HEAD, the 405s) and must answer the same; the
differential tests (tests/functions/test_hotpath.py, test_mcp_hotpath.py) hold them to it.

One rule for every fast path. It serves a request only when
- its `Content-Length` is well formed (ASCII digits) and within the body cap (a chunked body has none), and
- it has a `Host` (the public base URL of a 401's challenge is built from it);
otherwise it declines before reading anything, and Litestar answers (its 413, its 400s) as it would anyway. A request
it serves passes the browser guard first, as the guard middleware would run (functions/csrf.py `refusal`): a refusal
is logged and rendered by functions/errors.py `guard_answer`, as the middleware renders it. Typed errors are rendered
by functions/errors.py too; unknown errors are a logged 500.

CORS: with `console.cors` on, an answer to a request with an `Origin` gets the headers Litestar's CORS middleware
adds to the routes' answers (litestar/middleware/_internal/cors.py `send_wrapper`), after Content-Length, as it adds
them. Preflights (OPTIONS) are never a fast path's: Litestar answers them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from flux7.functions.csrf import log_refusal, refusal
from flux7.functions.errors import error_answer, guard_answer, internal_error
from flux7.functions.responses import Answer
from flux7.shared.errors import Flux7Error

if TYPE_CHECKING:
    from litestar.config.cors import CORSConfig

    from flux7.shared.mesh import Mesh

__all__ = ["GONE", "BodyReader", "FastHandler", "FastPaths", "cors_headers"]

GONE: Answer = (0, b"", None)  # the client went away before its body was in: nobody to answer
# Reads the body of the declared length: the bytes, or None when the client went away.
BodyReader = Callable[[int], Awaitable["bytes | None"]]
# (mesh, path, request headers, scheme, body) -> the answer. Headers: a dict of lower-case names and latin-1 text,
# the first of repeated headers, as Litestar's Headers.get answers.
FastHandler = Callable[["Mesh", str, Mapping[str, str], str, bytes], Awaitable[Answer]]


class FastPaths:
    """The table of fast paths of one app: (method, path shape) -> handler. A shape is an exact path or a prefix and
    one last segment (`/tool/{name}`: one non-empty segment after `/tool/`)."""

    def __init__(
        self,
        mesh: Mesh,
        routes: Mapping[tuple[str, str], FastHandler],
        *,
        max_body: int,
        allowed_origins: tuple[str, ...],
        cors: CORSConfig | None = None,
    ) -> None:
        self.mesh = mesh
        self.max_body = max_body
        self.allowed = allowed_origins
        self.cors = cors
        self._exact: dict[tuple[str, str], FastHandler] = {}
        self._segment: list[tuple[str, str, FastHandler]] = []  # (method, prefix, handler)
        for (method, shape), handler in routes.items():
            if "{" not in shape:
                self._exact[(method, shape)] = handler
                continue
            prefix, _, param = shape.partition("{")
            if not prefix.endswith("/") or not param.endswith("}") or "/" in param:
                raise ValueError(f"a fast path's shape is a path or a prefix and one last segment, not {shape!r}")
            self._segment.append((method, prefix, handler))

    def route(self, method: str, path: str) -> FastHandler | None:
        """The fast path that serves this request, None when Litestar does."""
        handler = self._exact.get((method, path))
        if handler is not None:
            return handler
        for m, prefix, handler in self._segment:
            if m == method and path.startswith(prefix) and len(path) > len(prefix) and "/" not in path[len(prefix) :]:
                return handler
        return None

    async def answer(
        self,
        handler: FastHandler,
        method: str,
        path: str,
        headers: Mapping[str, str],
        peer: str,
        scheme: str,
        read: BodyReader,
    ) -> Answer | None:
        """The answer under the rule (the module's docstring); None when Litestar should answer (nothing read)."""
        length = headers.get("content-length")
        if length is None or not (length.isascii() and length.isdigit()) or "host" not in headers:
            return None
        expected = int(length)
        if expected > self.max_body:
            return None
        error = refusal(method, path, headers, peer, self.allowed)
        # Read even when refusing: granian keeps the connection alive after an answer only once the request's body
        # is read (or had arrived), so a refusal would otherwise close it or not depending on packet timing.
        raw = await read(expected)
        if raw is None:
            return GONE
        if error is not None:
            log_refusal(method, path, peer, error)
            return guard_answer(path, error)
        try:
            return await handler(self.mesh, path, headers, scheme, raw)
        except Flux7Error as e:
            return error_answer(e)
        except Exception:
            return internal_error(method, path)

    def trailing(self, headers: Mapping[str, str]) -> list[tuple[str, str]]:
        """The headers sent after Content-Length: CORS's, for a request with an Origin when CORS is on."""
        if self.cors is None:
            return []
        origin = headers.get("origin")
        return cors_headers(self.cors, origin, "cookie" in headers) if origin else []


def cors_headers(config: CORSConfig, origin: str, has_cookie: bool) -> list[tuple[str, str]]:
    """What Litestar's CORS middleware adds to an answer to a request from `origin` (not a preflight), in its order:
    its simple headers, the origin echoed when allowed, the allowed headers and methods."""
    out = dict(config.simple_headers)
    allowed = config.is_allow_all_origins and has_cookie
    if allowed or (not config.is_allow_all_origins and config.is_origin_allowed(origin)):
        out["Access-Control-Allow-Origin"] = origin
        out["Vary"] = "Origin"
    out["Access-Control-Allow-Headers"] = ", ".join(sorted(set(config.allow_headers)))
    out["Access-Control-Allow-Methods"] = ", ".join(sorted(set(config.allow_methods)))
    return list(out.items())
