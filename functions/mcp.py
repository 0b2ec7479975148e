"""MCP Streamable HTTP at /mcp (CONTRACT 1.14): sessions for the handshake era (2024-11-05 … 2025-11-25) and
the stateless 2026-07-28 revision, told apart by the `MCP-Protocol-Version` header as the official SDK does.

POST takes one JSON-RPC object and answers application/json (no SSE stream); DELETE ends a session; any other
method gets 405 with `Allow: POST, DELETE`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from litestar import Request, Response, post, route
from litestar.enums import HttpMethod

from flux7.functions.auth import mesh_of
from flux7.functions.errors import error_body, jsonrpc_error
from flux7.functions.openapi import AGENT, header, json_body, ok, operation
from flux7.functions.responses import Answer, json_answer, response_of
from flux7.functions.schemas import JsonRpcMessage
from flux7.functions.wellknown import public_base
from flux7.shared.auth.identity import Caller
from flux7.shared.auth.resource_metadata import base_url, bearer_challenge
from flux7.shared.errors import Flux7Error, Unauthorized
from flux7.shared.mcp.messages import (
    HANDSHAKE_VERSIONS,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    MODERN_VERSIONS,
    McpError,
    Message,
    decode_message,
    http_status_for,
    modern_envelope,
    result_message,
    unsupported_version,
)
from flux7.shared.mcp.server import RequestContext
from flux7.shared.mcp.sessions import McpSession, same_identity

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["ROUTES", "McpRequest", "mcp_fast_path", "post_reply"]

log = logging.getLogger("flux7.mcp.http")

_ALLOW = {"Allow": "POST, DELETE"}

_ACCEPTED: Answer = (202, b"", None)


def _error(rid: Any, code: int, message: str, status: int) -> Answer:
    return jsonrpc_error(rid, McpError(code, message), status)


class _Refused(Exception):
    def __init__(self, reply: Answer) -> None:
        self.reply = reply


class McpRequest:
    """What an answer needs of one HTTP request: the mesh, the headers (lower-case names, the first of repeated
    ones, as Litestar's Headers.get answers) and, only for a 401, the public base URL (computed on demand)."""

    __slots__ = ("base", "headers", "mesh")

    def __init__(self, mesh: Mesh, headers: Mapping[str, str], base: Callable[[], str]) -> None:
        self.mesh = mesh
        self.headers = headers
        self.base = base


def _unauthorized(req: McpRequest, rid: Any, message: str, *, invalid_token: bool) -> _Refused:
    """401 -32600 with the challenge that points a standard MCP client at our RFC 9728 metadata."""
    challenge = bearer_challenge(req.base(), invalid_token=invalid_token)
    return _Refused(jsonrpc_error(rid, McpError(INVALID_REQUEST, message), 401, {"WWW-Authenticate": challenge}))


def _presented(req: McpRequest, rid: Any) -> Caller:
    """The identity the request's own credentials give; a bad credential (a JWT error) is 401 -32600."""
    try:
        return req.mesh.identity.caller(req.headers.get("authorization"))
    except Unauthorized as e:
        raise _unauthorized(req, rid, e.message, invalid_token=True) from None


def _require(req: McpRequest, caller: Caller, rid: Any) -> Caller:
    try:
        return req.mesh.identity.require(caller)
    except Unauthorized as e:
        raise _unauthorized(req, rid, e.message, invalid_token=caller.authenticated) from None


def _session(req: McpRequest, presented: Caller, rid: Any) -> McpSession:
    """The session named by Mcp-Session-Id. Its caller was fixed when it opened; a request presenting other
    credentials, or none where the opener presented some, gets the same 404 as an unknown id: it learns nothing
    about the session, and a conforming client answers by opening its own (MCP: "Session Management")."""
    sid = req.headers.get("mcp-session-id")
    if not sid:
        raise _Refused(_error(rid, INVALID_REQUEST, "Missing Mcp-Session-Id header", 400))
    session = req.mesh.mcp_sessions.get(sid)
    if session is None or not same_identity(session.caller, presented):
        raise _Refused(_error(rid, INVALID_REQUEST, "Unknown session", 404))
    return session


async def _answer(req: McpRequest, msg: Message, ctx: RequestContext) -> Answer:
    try:
        result = await req.mesh.mcp.handle(msg, ctx)
    except McpError as e:
        return jsonrpc_error(msg.id, e, http_status_for(e.code, modern=ctx.modern))
    except Flux7Error as e:
        return _error(msg.id, e.jsonrpc_code, e.message, http_status_for(e.jsonrpc_code, modern=ctx.modern))
    except Exception:
        log.exception("MCP %s failed", msg.method)
        return _error(msg.id, INTERNAL_ERROR, "Internal error", 500 if ctx.modern else 200)
    if result is None:
        return _ACCEPTED
    return json_answer(result_message(msg.id, result))


def _context(
    req: McpRequest,
    caller: Caller,
    session_id: str,
    modern: bool,
    *,
    mcp_session: McpSession | None = None,
    version: str = "",
) -> RequestContext:
    h = req.headers
    return RequestContext(
        caller=caller,
        session_id=session_id,
        modern=modern,
        traceparent=h.get("traceparent"),
        x_trace_id=h.get("x-trace-id"),
        transport="mcp",
        mcp_session_id=mcp_session.id if mcp_session is not None else "",
        protocol_version=mcp_session.protocol_version if mcp_session is not None else version,
    )


async def _handshake_era(req: McpRequest, msg: Message) -> Answer:
    presented = _presented(req, msg.id)
    mesh = req.mesh
    if msg.method == "initialize" and msg.has_id:
        # initialize always mints a new session, whatever session header the client sent.
        caller = _require(req, presented, msg.id)
        ctx = _context(req, caller, "", False)
        result = await mesh.mcp.handle(msg, ctx)
        assert result is not None  # initialize is a request: it always has a result
        params = msg.params if isinstance(msg.params, dict) else {}
        info: dict[str, Any] = params["clientInfo"] if isinstance(params.get("clientInfo"), dict) else {}
        session = mesh.mcp_sessions.create(caller, str(result["protocolVersion"]), str(info.get("name") or ""))
        return json_answer(result_message(msg.id, result), headers={"Mcp-Session-Id": session.id})
    # The request's own credentials must pass the gate (a 401 tells a client without them where to get a
    # token) and be those that opened the session.
    session = _session(req, _require(req, presented, msg.id), msg.id)
    caller = session.caller
    if msg.is_notification or msg.is_response:
        return _ACCEPTED
    return await _answer(req, msg, _context(req, caller, session.id, False, mcp_session=session))


async def _stateless_era(req: McpRequest, msg: Message, version: str) -> Answer:
    if msg.is_response:
        return _error(None, INVALID_REQUEST, "Body must be a single JSON-RPC request or notification object", 400)
    if msg.is_notification:
        if version not in MODERN_VERSIONS:
            return jsonrpc_error(None, unsupported_version(version), 400)
        return _ACCEPTED
    try:
        modern_envelope(msg, req.headers)
    except McpError as e:
        return jsonrpc_error(msg.id, e, http_status_for(e.code, modern=True))
    caller = _require(req, _presented(req, msg.id), msg.id)
    ctx = _context(req, caller, req.headers.get("x-session-id", ""), True, version=version)
    return await _answer(req, msg, ctx)


async def post_reply(req: McpRequest, raw: bytes) -> Answer:
    """POST /mcp once the body is read (and passed the browser guard): the handler of the Litestar route and of
    its fast path (functions/fastpath.py). A Flux7Error raised here (a busy store) is rendered by the caller
    (functions/errors.py)."""
    try:
        msg = decode_message(raw)
    except McpError as e:
        return jsonrpc_error(None, e, 400)
    version = req.headers.get("mcp-protocol-version")
    try:
        if version is not None and version not in HANDSHAKE_VERSIONS:
            return await _stateless_era(req, msg, version)
        return await _handshake_era(req, msg)
    except _Refused as r:
        return r.reply


async def mcp_fast_path(mesh: Mesh, path: str, headers: Mapping[str, str], scheme: str, raw: bytes) -> Answer:
    """POST /mcp on its fast path (functions/app.py `FAST_PATHS`): the public base URL as functions/wellknown.py
    `public_base` gives it (the fast path serves only requests with a Host)."""
    req = McpRequest(
        mesh, headers, lambda: base_url(mesh.settings, scheme, headers["host"], headers.get("x-forwarded-proto"))
    )
    return await post_reply(req, raw)


def _request(request: Request[Any, Any, Any]) -> McpRequest:
    return McpRequest(mesh_of(request), request.headers, lambda: public_base(request))


def _rpc(description: str) -> Any:
    return ok(JsonRpcMessage, description)


# Documented minimally: MCP is its own protocol (CONTRACT 1.14); the OpenAPI document gives its envelope.
@post(
    "/mcp",
    status_code=200,
    tags=["data plane"],
    security=AGENT,
    summary="MCP Streamable HTTP",
    operation_class=json_body(
        JsonRpcMessage,
        required=True,
        description="One JSON-RPC 2.0 object",
        headers=(
            header("Mcp-Session-Id", "The session (handshake revisions), from the initialize answer"),
            header("MCP-Protocol-Version", "The protocol revision; a stateless one selects the sessionless mode"),
            header("Traceparent", "W3C trace context"),
        ),
    ),
    responses={
        200: _rpc("The JSON-RPC answer (in a session, protocol errors too)"),
        202: ok(None, "A notification or a response: no body"),
        400: _rpc("A JSON-RPC error: parse error (`-32700`, JSON nested too deep included) or invalid request"),
        401: _rpc("Authentication required or refused (with `WWW-Authenticate`)"),
        403: _rpc("Origin not allowed"),
        404: _rpc("Unknown session, or an unknown method in the stateless revision"),
        415: ok(dict[str, Any], "Unsupported media type: `Content-Type: application/json` is required"),
    },
)
async def mcp_post(request: Request[Any, Any, Any]) -> Response[bytes]:
    # Origin, Sec-Fetch-Site and Content-Type were checked by the browser guard (functions/csrf.py).
    return response_of(await post_reply(_request(request), await request.body()))


@route(
    "/mcp",
    http_method=[HttpMethod.DELETE],
    status_code=200,
    tags=["data plane"],
    security=AGENT,
    summary="End an MCP session",
    operation_class=operation(drop=("200",)),  # 204 or an error, never 200
    responses={
        204: ok(None, "The session is closed"),
        400: _rpc("Missing Mcp-Session-Id"),
        401: _rpc("Authentication required or refused"),
        403: _rpc("Origin not allowed"),
        404: _rpc("Unknown session"),
    },
)
async def mcp_delete(request: Request[Any, Any, Any]) -> Response[bytes]:
    req = _request(request)
    try:
        session = _session(req, _require(req, _presented(req, None), None), None)
    except _Refused as r:
        return response_of(r.reply)
    req.mesh.mcp_sessions.delete(session.id)
    return Response(b"", status_code=204)


@route("/mcp", http_method=[HttpMethod.GET, HttpMethod.PUT, HttpMethod.PATCH], status_code=405, include_in_schema=False)
async def mcp_other(request: Request[Any, Any, Any]) -> Response[bytes]:
    # No server-initiated stream: the mesh never pushes to clients.
    return response_of(error_body("method not allowed", 405, dict(_ALLOW)))


ROUTES = [mcp_post, mcp_delete, mcp_other]
