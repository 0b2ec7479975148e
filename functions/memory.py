"""mem7's HTTP edge (CONTRACT 2.1): /rpc, /healthz, /memory/*, the deprecated /sse + /messages, and, for
`mem7 serve` alone, the sessionless Streamable HTTP /mcp. Handlers parse, authorise, call the service."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import msgspec
from litestar import Litestar, Request, Response, get, route
from litestar.enums import HttpMethod
from litestar.response import Stream

from shared.errors import Unauthorized
from shared.memory.jsonrpc import RpcAnswer, dispatch, error_answer
from shared.memory.service import MemoryService
from shared.tokens import looks_like_agent_token

from .csrf import browser_guard
from .errors import EXCEPTION_HANDLERS
from .head import HeadAsGet

__all__ = ["MCP_ROUTES", "ROUTES", "create_memory_app"]

RPC_BODY_LIMIT = 8 * 1024 * 1024
KEEPALIVE_SECONDS = 30.0
_OTHER_METHODS = [HttpMethod.GET, HttpMethod.PUT, HttpMethod.PATCH, HttpMethod.DELETE]


def _service(request: Request[Any, Any, Any]) -> MemoryService | None:
    state = request.app.state
    service = state.get("memory")
    if service is None and state.get("mesh") is not None:
        service = getattr(state.mesh, "memory", None)
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
    if mesh is not None and offered and mesh.identity.is_admin(offered, None):
        return _Auth(True)  # the admin token itself (the console, the operator): as trusted as the memory token
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


def _json(body: Any, status: int = 200) -> Response[bytes]:
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")


@route("/rpc", http_method=[HttpMethod.POST, *_OTHER_METHODS], request_max_body_size=None)
async def rpc(request: Request[Any, Any, Any]) -> Response[Any]:
    """JSON-RPC 2.0; always HTTP 200 once authorised, protocol errors included."""
    admitted = _admit(request, "POST")
    if isinstance(admitted, Response):
        return admitted
    service, authenticated = admitted
    return _json((await _answer(request, service, authenticated)).body)


@route("/mcp", http_method=[HttpMethod.POST, *_OTHER_METHODS], request_max_body_size=None)
async def mcp(request: Request[Any, Any, Any]) -> Response[Any]:
    """Streamable HTTP without sessions: /rpc's answers, and 202 with no body for a notification."""
    admitted = _admit(request, "POST")
    if isinstance(admitted, Response):
        return admitted
    service, authenticated = admitted
    answer = await _answer(request, service, authenticated)
    if answer.parsed and not answer.has_id:
        return Response(b"", status_code=202)
    return _json(answer.body)


@route("/healthz", http_method=[*_OTHER_METHODS, HttpMethod.POST])
async def healthz(request: Request[Any, Any, Any]) -> Response[Any]:
    service = _service(request)
    if service is None:
        return _NOT_FOUND
    if request.method != "GET":
        return _not_allowed("GET")
    return _json({"status": "ok", "version": service.config.version})


@route("/memory/snapshot_reminder", http_method=[HttpMethod.POST, *_OTHER_METHODS])
async def snapshot_reminder(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request, "POST")
    if isinstance(admitted, Response):
        return admitted
    return _json(await asyncio.to_thread(admitted[0].snapshot_reminder))


@get("/memory/chain")
async def chain(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request)
    if isinstance(admitted, Response):
        return admitted
    return _json(await asyncio.to_thread(admitted[0].chain))


@get("/sse")
async def sse(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request)
    if isinstance(admitted, Response):
        return admitted
    service = admitted[0]
    session, queue = await asyncio.to_thread(service.sse.open)

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


@route("/messages", http_method=[HttpMethod.POST], request_max_body_size=None)
async def messages(request: Request[Any, Any, Any]) -> Response[Any]:
    admitted = _admit(request)
    if isinstance(admitted, Response):
        return admitted
    service, authenticated = admitted
    session = request.query_params.get("sessionId", "")
    if not session or not await asyncio.to_thread(service.sse.exists, session):
        return _text("unknown session\n", 400)
    answer = await _answer(request, service, authenticated)
    if answer.has_id:
        await asyncio.to_thread(service.sse.deliver, session, msgspec.json.encode(answer.body))
    return Response(b"", status_code=202)


ROUTES = [rpc, healthz, snapshot_reminder, chain, sse, messages]
MCP_ROUTES = [mcp]


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
