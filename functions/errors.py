"""One place where typed errors become HTTP responses. Unknown errors: a generic 500, logged."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException

from flux7.shared.errors import Flux7Error

__all__ = ["EXCEPTION_HANDLERS"]

log = logging.getLogger("flux7.http")


def _flux7_error(_: Request[Any, Any, Any], exc: Flux7Error) -> Response[Any]:
    # 503: the store was busy past its bounded wait; a retry a moment later may succeed.
    headers = {"Retry-After": "1"} if exc.status_code == 503 else None
    return Response(exc.body(), status_code=exc.status_code, headers=headers)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    if isinstance(exc, NotFoundException) or exc.status_code == 404:
        return Response("404 page not found\n", status_code=404, media_type="text/plain")
    if exc.status_code == 405:
        return Response({"error": "method not allowed"}, status_code=405, headers=exc.headers or {})
    if exc.status_code == 413:
        return Response({"error": "request body too large"}, status_code=413)
    if exc.status_code == 400:
        return Response({"error": "invalid JSON body"}, status_code=400)
    return Response({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers or {})


def _unknown_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return Response({"error": "internal error"}, status_code=500)


EXCEPTION_HANDLERS = {Flux7Error: _flux7_error, HTTPException: _http_error, Exception: _unknown_error}
