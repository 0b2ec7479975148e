"""The one renderer of errors: a typed error (shared/errors.py) becomes a status, a JSON body and headers here, for the
Litestar routes (EXCEPTION_HANDLERS) and the fast paths (functions/fastpath.py) alike.

Three body shapes, each the contract's: `{"error": "<why>"}` (every REST route; a typed error's `extra` fields
follow), POST /tool's refusal before the pipeline ran `{error, policy: "error", trace_id: "", latency_ms: 0}`
(CONTRACT 1.7), and the JSON-RPC error envelope of the JSON-RPC routes (CONTRACT 1.14). A 503 (the store could not
take the write) says `Retry-After: 1`. Unknown errors: a generic 500, logged."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException

from flux7.functions.responses import Answer, json_answer, response_of
from flux7.shared.errors import Flux7Error
from flux7.shared.mcp.messages import McpError, error_message

__all__ = [
    "EXCEPTION_HANDLERS",
    "INTERNAL",
    "JSONRPC_PATHS",
    "TOO_LARGE",
    "ErrorBody",
    "ToolRefusal",
    "UnknownTool",
    "error_answer",
    "error_body",
    "guard_answer",
    "internal_error",
    "jsonrpc_error",
    "tool_refusal",
]

log = logging.getLogger("flux7.http")

# The routes that speak JSON-RPC: their refusals before any handler ran are JSON-RPC errors too.
JSONRPC_PATHS = frozenset({"/mcp", "/rpc", "/messages"})
_RETRY = {"Retry-After": "1"}  # 503: the store was busy past its bounded wait; a retry a moment later may succeed


class ErrorBody(msgspec.Struct):
    """The one error shape of the REST routes: `{"error": "<why>"}`."""

    error: str


class ToolRefusal(msgspec.Struct, kw_only=True):
    """POST /tool/{name} refused before the pipeline ran (CONTRACT 1.7): a bad body or callback URL (400), an audit
    trail that cannot be written (503). Nothing was traced, so the trace id is empty."""

    error: str
    policy: str = "error"
    trace_id: str = ""
    latency_ms: int = 0


class UnknownTool(msgspec.Struct, kw_only=True):
    """POST /tool/{name} of a tool the registry does not have (CONTRACT 1.7): 404, no trace."""

    error: str
    policy: str = "error"


def _retry(status: int) -> dict[str, str] | None:
    return dict(_RETRY) if status == 503 else None


def error_body(message: str, status: int, headers: dict[str, str] | None = None) -> Answer:
    """`{"error": message}`."""
    return json_answer(ErrorBody(message), status, headers)


TOO_LARGE = error_body("request body too large", 413)
INTERNAL = error_body("internal error", 500)


def error_answer(error: Flux7Error) -> Answer:
    """A typed error on a REST route: `{"error": ..., **extra}`."""
    body = error.body() if error.extra else ErrorBody(error.message)
    return json_answer(body, error.status_code, _retry(error.status_code))


def tool_refusal(message: str, status: int = 400) -> Answer:
    """POST /tool/{name} refused before the pipeline ran: no trace, so no trace id (CONTRACT 1.7)."""
    return json_answer(ToolRefusal(error=message), status, _retry(status))


def jsonrpc_error(rid: Any, error: McpError, status: int, headers: dict[str, str] | None = None) -> Answer:
    """The JSON-RPC error envelope `{jsonrpc, id, error: {code, message, data?}}`."""
    return json_answer(error_message(rid, error), status, headers)


def guard_answer(path: str, error: Flux7Error) -> Answer:
    """The browser guard's refusal (functions/csrf.py): a JSON-RPC error on the JSON-RPC routes, else a typed error."""
    if path not in JSONRPC_PATHS:
        return error_answer(error)
    message = f"Forbidden: {error.message}" if error.status_code == 403 else error.message
    return jsonrpc_error(None, McpError(error.jsonrpc_code, message), error.status_code)


def internal_error(method: str, path: str) -> Answer:
    """An unknown error: logged with its traceback (call it from the except block), answered as a generic 500."""
    log.exception("unhandled error on %s %s", method, path)
    return INTERNAL


# -- Litestar's exception handlers ----------------------------------------------------------------------------------


def _flux7_error(_: Request[Any, Any, Any], exc: Flux7Error) -> Response[bytes]:
    return response_of(error_answer(exc))


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    if isinstance(exc, NotFoundException) or exc.status_code == 404:
        return Response("404 page not found\n", status_code=404, media_type="text/plain")
    if exc.status_code == 405:
        return response_of(error_body("method not allowed", 405, exc.headers or {}))
    if exc.status_code == 413:
        return response_of(TOO_LARGE)
    if exc.status_code == 400:
        return response_of(error_body("invalid JSON body", 400))
    return response_of(error_body(exc.detail, exc.status_code, exc.headers or {}))


def _unknown_error(request: Request[Any, Any, Any], _: Exception) -> Response[bytes]:
    return response_of(internal_error(request.method, request.url.path))


EXCEPTION_HANDLERS = {Flux7Error: _flux7_error, HTTPException: _http_error, Exception: _unknown_error}
