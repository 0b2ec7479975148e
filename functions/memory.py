"""mem7's HTTP edge (CONTRACT 2.1): /rpc, /healthz, /memory/*, the deprecated /sse + /messages, and, for
`mem7 serve` alone, the sessionless Streamable HTTP /mcp. Handlers parse, authorise, call the service."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import msgspec
from litestar import Litestar, Request, Response, get, post, route
from litestar.enums import HttpMethod
from litestar.response import Stream

from flux7.functions.csrf import browser_guard
from flux7.functions.errors import EXCEPTION_HANDLERS
from flux7.functions.head import HeadAsGet
from flux7.functions.openapi import ADMIN, PUBLIC, json_body, ok, text_responses
from flux7.functions.responses import json_response
from flux7.shared.auth.tokens import looks_like_agent_token
from flux7.shared.auth.users import SESSION_COOKIE
from flux7.shared.errors import Unauthorized
from flux7.shared.mcp.messages import JsonRpcMessage
from flux7.shared.memory.jsonrpc import RpcAnswer, dispatch, error_answer
from flux7.shared.memory.service import MemoryService

__all__ = ["MCP_ROUTES", "ROUTES", "MemoryChain", "MemoryHealth", "SnapshotReminder", "create_memory_app", "serve_app"]


class MemoryHealth(msgspec.Struct, kw_only=True):
    status: str
    version: str


# The memory service answers these as dicts, shared with its JSON-RPC tools; they describe them to OpenAPI.
class SnapshotReminder(msgspec.Struct, kw_only=True):
    reminder: str = ""
    workspace: str = ""
    memory_count: int = 0
    generated_at: str = ""


class MemoryChain(msgspec.Struct, kw_only=True):
    holds: bool
    report: Any = None


RPC_BODY_LIMIT = 8 * 1024 * 1024
KEEPALIVE_SECONDS = 30.0
_OTHER_METHODS = [HttpMethod.GET, HttpMethod.PUT, HttpMethod.PATCH, HttpMethod.DELETE]


def _service(request: Request[Any, Any, Any]) -> MemoryService | None:
    state = request.app.state
    service = state.get("memory")
    if service is None and state.get("mesh") is not None:
        service = state.mesh.memory
    return service


def _text(text: str, status: int, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(text, status_code=status, media_type="text/plain; charset=utf-8", headers=headers)


def _not_allowed(allow: str) -> Response[str]:
    return _text("method not allowed\n", 405, {"Allow": allow})


_NOT_FOUND = _text("404 page not found\n", 404)


class _Auth(NamedTuple):
    authenticated: bool  # the memory token, or a verified agent: `_meta` identities are believed
    agent: str | None = None  # the agent an agent token or a JWT names: the only identity the call may use


def _verified_agent(request: Request[Any, Any, Any], offered: str) -> str | Unauthorized | None:
    """In the combined service: the agent a valid agent token or JWT names, None for anything unproven, the
    refusal for a credential that is presented but invalid."""
    mesh = request.app.state.get("mesh")
    if mesh is None or not offered:
        return None
    try:
        caller = mesh.identity.caller(offered)
    except Unauthorized as e:
        return e
    return caller.agent_id if caller.verified else None


def _authenticated(request: Request[Any, Any, Any], service: MemoryService) -> _Auth | None:
    """Who may use memory: the memory token's holder (the mesh, mem7 clients), an agent with its own token or
    JWT (as that agent), or, when no token is set and the mesh believes claims (loopback), anyone. None: refused."""
    offered = request.headers.get("authorization", "")
    if service.token and hmac.compare_digest(offered.encode(), f"Bearer {service.token}".encode()):
        return _Auth(True)
    mesh = request.app.state.get("mesh")
    if mesh is not None and (offered or SESSION_COOKIE in request.cookies):
        principal = mesh.identity.principal(offered, None, request.cookies.get(SESSION_COOKIE, ""))
        if principal is not None and principal.writes:
            return _Auth(True)  # the admin token, an admin or owner (the console): as trusted as the memory token
    agent = _verified_agent(request, offered)
    if isinstance(agent, str):
        return _Auth(True, agent)
    if service.token:
        return None
    strict = mesh is not None and not mesh.identity.claims_allowed
    if strict or (isinstance(agent, Unauthorized) and looks_like_agent_token(offered.removeprefix("Bearer ").strip())):
        return None
    return _Auth(False)


def _admit(request: Request[Any, Any, Any], method: str | None = None) -> tuple[MemoryService, _Auth] | Response[str]:
    """The service and whether the caller carries its token, or the refusal to send instead: 404 when memory is
    off, 405 for another method than `method`, 401 for a wrong token."""
    service = _service(request)
    if service is None:
        return _NOT_FOUND
    if method is not None and request.method != method:
        return _not_allowed(method)
    authenticated = _authenticated(request, service)
    if authenticated is None:
        return _text("unauthorized\n", 401)
    return service, authenticated


async def _body(request: Request[Any, Any, Any]) -> bytes | None:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > RPC_BODY_LIMIT:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _answer(request: Request[Any, Any, Any], service: MemoryService, auth: _Auth) -> RpcAnswer:
    body = await _body(request)
    if body is None:
        return error_answer(-32700, "parse error: http: request body too large")
    return await asyncio.to_thread(dispatch, service, body, authenticated=auth.authenticated, identity=auth.agent)


def _refuse(path: str, allow: str, methods: list[HttpMethod]) -> Any:
    """The methods a memory route does not take: 404 while memory is off, else 405 naming the one it takes.
    Out of the OpenAPI document: only the method a route serves is described there."""

    @route(path, http_method=methods, status_code=405, include_in_schema=False, request_max_body_size=None)
    async def refuse(request: Request[Any, Any, Any]) -> Response[Any]:
        return _NOT_FOUND if _service(request) is None else _not_allowed(allow)

    return refuse


# The memory token, the admin token or a verified agent; with no memory token and claims believed, anyone.
_MEMORY_AUTH: list[dict[str, list[str]]] = [{"memory": []}, *ADMIN, {"agent": []}, {}]
_RPC_RESPONSES = {
    200: ok(JsonRpcMessage, "The JSON-RPC answer, errors included (`-32700` for bad or too deeply nested JSON)"),
    **text_responses(401, 404),
}
_RPC_BODY = json_body(JsonRpcMessage, required=True, description="One JSON-RPC 2.0 object")


@post(
    "/rpc",
    status_code=200,
    request_max_body_size=None,
    tags=["memory"],
    security=_MEMORY_AUTH,
    operation_class=_RPC_BODY,
    responses=_RPC_RESPONSES,
)
async def rpc(request: Request[Any, Any, Any]) -> Response[Any]:
    """JSON-RPC 2.0; always HTTP 200 once authorised, protocol errors included."""
    admitted = _admit(request, "POST")
    if isinstance(admitted, Response):
        return admitted
    service, authenticated = admitted
    return json_response((await _answer(request, service, authenticated)).body)


@post(
    "/mcp",
    status_code=200,
    request_max_body_size=None,
    tags=["memory"],
    security=_MEMORY_AUTH,
    operation_class=_RPC_BODY,
    responses={**_RPC_RESPONSES, 202: ok(None, "A notification: no body")},
)
async def mcp(request: Request[Any, Any, Any]) -> Response[Any]:
    """Streamable HTTP without sessions: /rpc's answers, and 202 with no body for a notification."""
    admitted = _admit(request, "POST")
    if isinstance(admitted, Response):
        return admitted
    service, authenticated = admitted
    answer = await _answer(request, service, authenticated)
    if answer.parsed and not answer.has_id:
        return Response(b"", status_code=202)
    return json_response(answer.body)


@get("/healthz", tags=["memory"], security=PUBLIC, responses={200: ok(MemoryHealth), **text_responses(404)})
async def healthz(request: Request[Any, Any, Any]) -> Response[Any]:
    service = _service(request)
    if service is None:
        return _NOT_FOUND
    return json_response(MemoryHealth(status="ok", version=service.config.version))


@post(
    "/memory/snapshot_reminder",
    status_code=200,
    tags=["memory"],
    security=_MEMORY_AUTH,
    responses={200: ok(SnapshotReminder), **text_responses(401, 404)},
)
async def snapshot_reminder(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request, "POST")
    if isinstance(admitted, Response):
        return admitted
    return json_response(await asyncio.to_thread(admitted[0].snapshot_reminder))


@get(
    "/memory/chain",
    tags=["memory"],
    security=_MEMORY_AUTH,
    responses={200: ok(MemoryChain), **text_responses(401, 404)},
)
async def chain(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request)
    if isinstance(admitted, Response):
        return admitted
    return json_response(await asyncio.to_thread(admitted[0].chain))


@get("/sse", include_in_schema=False)  # a stream (the deprecated MCP SSE transport), not REST
async def sse(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request)
    if isinstance(admitted, Response):
        return admitted
    service = admitted[0]
    session, queue = await asyncio.to_thread(service.sse.open, request.headers.get("authorization", ""))

    async def events() -> AsyncIterator[bytes]:
        yield f"event: endpoint\ndata: /messages?sessionId={session}\n\n".encode()
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        try:
            while True:
                try:
                    payloads = [await asyncio.wait_for(queue.get(), timeout=0.25)]
                except TimeoutError:
                    payloads = await asyncio.to_thread(service.sse.drain, session)
                for payload in payloads:
                    yield b"event: message\ndata: " + payload + b"\n\n"
                    quiet_since = loop.time()
                if loop.time() - quiet_since >= KEEPALIVE_SECONDS:
                    yield b": keepalive\n\n"
                    quiet_since = loop.time()
        finally:
            await asyncio.to_thread(service.sse.close, session)

    return Stream(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@route("/messages", http_method=[HttpMethod.POST], request_max_body_size=None, include_in_schema=False)
async def messages(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request)
    if isinstance(admitted, Response):
        return admitted
    service, authenticated = admitted
    session = request.query_params.get("sessionId", "")
    owner = request.headers.get("authorization", "")
    if not session or not await asyncio.to_thread(service.sse.owned_by, session, owner):
        return _text("unknown session\n", 404)  # another credential's session is as unknown as a made-up one
    answer = await _answer(request, service, authenticated)
    if answer.has_id:
        await asyncio.to_thread(service.sse.deliver, session, msgspec.json.encode(answer.body))
    return Response(b"", status_code=202)


_NOT_GET = [HttpMethod.POST, HttpMethod.PUT, HttpMethod.PATCH, HttpMethod.DELETE]
ROUTES = [
    rpc,
    _refuse("/rpc", "POST", _OTHER_METHODS),
    healthz,
    _refuse("/healthz", "GET", _NOT_GET),
    snapshot_reminder,
    _refuse("/memory/snapshot_reminder", "POST", _OTHER_METHODS),
    chain,
    sse,
    messages,
]
MCP_ROUTES = [mcp, _refuse("/mcp", "POST", _OTHER_METHODS)]


def create_memory_app(service: MemoryService) -> Litestar:
    """`mem7 serve`: memory alone, with the reference's routes (its /mcp is memory)."""

    async def _stop() -> None:
        service.close()

    app = HeadAsGet(  # every GET route also answers HEAD
        route_handlers=[*ROUTES, *MCP_ROUTES],
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        on_shutdown=[_stop],
        request_max_body_size=RPC_BODY_LIMIT,
        middleware=[browser_guard(())],  # no console of its own: only non-browser clients change anything
        openapi_config=None,
        debug=False,
    )
    app.state.memory = service
    return app


def serve_app() -> Litestar:
    """granian's factory in each `mem7 serve` worker: the memory app over the config its parent validated."""
    from flux7.shared.memory.cli import worker_service

    return create_memory_app(worker_service())
