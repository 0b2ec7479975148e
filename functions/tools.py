"""The governed data plane: POST /tool/{name}, POST /decide (and its outcome), GET /tools, GET /mcp-servers,
GET /tools/decisions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery

from flux7.functions.auth import caller_of, caller_or_admin, control_plane, mesh_of, peer_of
from flux7.functions.errors import ErrorBody, UnknownTool, tool_refusal
from flux7.functions.openapi import ADMIN, AGENT, BODY, CALL_HEADERS, header, json_body, ok, responses
from flux7.functions.responses import Answer, json_answer, json_response, response_of
from flux7.functions.schemas import (
    Decide,
    DecideOutcome,
    Decision,
    McpServerView,
    ToolCall,
    ToolDecision,
    ToolRefusal,
    ToolResult,
    ToolView,
    TraceView,
)
from flux7.shared.auth.identity import Caller
from flux7.shared.auth.users import SESSION_COOKIE
from flux7.shared.errors import BadRequest, Forbidden, OutboundRefused, TooDeep, Unauthorized, Unavailable
from flux7.shared.gate.decide_outcome import OutcomeReport, report_outcome
from flux7.shared.gate.pipeline import ApprovalMode, Call, Outcome
from flux7.shared.json_depth import decode
from flux7.shared.tracecontext import from_headers
from flux7.shared.tracing import entry_to_wire

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["ROUTES", "governed_call", "tool_fast_path"]

log = logging.getLogger("flux7.http")


def _arguments(raw: bytes) -> Any:
    """DESIGN decision 1: `{"params": {...}}` is canonical; a body without a top-level params key is the arguments."""
    if not raw.strip():
        return None
    body = decode(raw)
    if isinstance(body, dict) and "params" in body:
        params = body["params"]
        if params is not None and not isinstance(params, dict):
            raise BadRequest("params must be a JSON object")
        return params
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _call(h: Mapping[str, str], caller: Caller, tool: str, arguments: Any, transport: str) -> Call:
    return Call(
        caller=caller,
        tool=tool,
        arguments=arguments,
        trace=from_headers(h.get("traceparent"), h.get("x-trace-id")),
        session_id=h.get("x-session-id", ""),
        callback_url=h.get("x-callback-url", ""),
        transport=transport,
    )


async def governed_call(mesh: Mesh, name: str, raw: bytes, headers: Mapping[str, str]) -> Answer:
    """POST /tool/{name} once the request is read (and passed the browser guard): the handler of the Litestar route
    and of its fast path (functions/fastpath.py)."""
    try:
        arguments = _arguments(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return tool_refusal("invalid JSON body")
    except TooDeep as e:
        return tool_refusal(e.message)
    except BadRequest as e:
        return tool_refusal(e.message)
    identity = mesh.identity
    caller = identity.require(identity.caller(headers.get("authorization")))
    callback = headers.get("x-callback-url", "")
    if callback:
        # Refused now, where the caller hears why, rather than only at delivery (which checks again).
        try:
            await asyncio.to_thread(mesh.outbound.check_url, callback)
        except OutboundRefused as e:
            log.warning("X-Callback-URL %s from %s refused: %s", callback, caller.agent_id, e.message)
            return tool_refusal(f"X-Callback-URL refused: {e.message}")
    try:
        out: Outcome = await mesh.pipeline.run(_call(headers, caller, name, arguments, "rest"), mode="block")
    except Unavailable as e:
        # Fail closed: the upstream was not called; the trace id of a refused call would point at nothing.
        return tool_refusal(e.message, 503)
    if out.unknown_tool:
        return json_answer(UnknownTool(error=out.error), 404)
    return out.status, msgspec.json.encode(out.rest_body()), {"X-Trace-Id": out.trace_id}


async def tool_fast_path(mesh: Mesh, path: str, headers: Mapping[str, str], scheme: str, raw: bytes) -> Answer:
    """POST /tool/{name} on its fast path (functions/app.py `FAST_PATHS`)."""
    return await governed_call(mesh, path.rpartition("/")[2], raw, headers)


_RESULT = {
    200: ok(ToolResult, "The call was forwarded: `result` is the upstream's answer"),
    400: ok(ToolRefusal, "Invalid JSON body, a refused X-Callback-URL, or JSON nested too deep"),
    401: ok(ToolResult, "Authentication required or refused"),
    403: ok(ToolResult, "Denied by policy, halted, or the approval was denied"),
    404: ok(UnknownTool, "Unknown tool"),
    408: ok(ToolResult, "The approval timed out"),
    429: ok(ToolResult, "Rate limited"),
    502: ok(ToolResult, "The upstream failed"),
    504: ok(ToolResult, "The upstream timed out"),
    **responses({}, 413, 415),
    503: ok(ToolRefusal, "Unavailable: the audit trail cannot be written (with `Retry-After`)"),
}


@post(
    "/tool/{name:str}",
    status_code=200,
    tags=["data plane"],
    security=AGENT,
    operation_class=json_body(
        ToolCall,
        description='`{"params": {...}}`, or the arguments object itself',
        headers=(*CALL_HEADERS, header("X-Callback-URL", "Where the approval's outcome is posted (public URLs only)")),
    ),
    responses=_RESULT,
)
async def call_tool(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    return response_of(await governed_call(mesh_of(request), name, await request.body(), request.headers))


class _Preview(msgspec.Struct, forbid_unknown_fields=True):
    """What the call would change, shown to the human who approves it (a file edit's unified diff)."""

    kind: str = "diff"
    path: str = ""
    diff: str = ""


PREVIEW_MAX_BYTES = 64 * 1024


class _DecideBody(msgspec.Struct):
    """/decide's body as decoded (functions/schemas.py `Decide` documents it: a missing `tool` is refused with its
    own text, so it is not required here)."""

    tool: str = ""
    arguments: Any = None
    agent: str = ""
    wait: bool = False  # hold a human_approval in the queue and answer once it is resolved
    preview: _Preview | None = None  # shown beside the approval (flux7 agent sends a diff for its edits)


@post(
    "/decide",
    status_code=200,
    tags=["data plane"],
    security=AGENT,
    operation_class=json_body(Decide, required=True, headers=CALL_HEADERS),
    responses={
        **responses({}, *BODY, 401, 503),
        200: ok(Decision, "allow or human_approval"),
        403: ok(Decision | ErrorBody, "deny (a halt adds `halted: true`); or, as `{error}`, impersonation refused"),
        408: ok(Decision, "With `wait`: the approval timed out; the decision with `error`"),
        429: ok(Decision, "Rate limited: the decision with `error`"),
    },
)
async def decide(request: Request[Any, Any, Any]) -> Response[Decision]:
    raw = await request.body()
    try:
        body = decode(raw or b"{}", type=_DecideBody)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise BadRequest("invalid JSON body") from None
    if not body.tool:
        raise BadRequest("tool field required")
    mesh = mesh_of(request)
    resolved = caller_or_admin(request)  # None: the admin, which names no agent off loopback
    if resolved is None and not body.agent:
        raise Unauthorized("authentication required: the admin token names no agent; give one in `agent`")
    caller = resolved or Caller(agent_id=body.agent, authenticated=True)
    if body.agent and body.agent != caller.agent_id:
        # No impersonation unless the caller holds the control plane's write rights (an admin, an owner).
        principal = mesh.identity.principal(
            request.headers.get("authorization"), peer_of(request), request.cookies.get(SESSION_COOKIE, "")
        )
        if principal is None or not principal.writes:
            raise Forbidden(f"agent {body.agent!r} does not match the authenticated caller {caller.agent_id!r}")
        caller = Caller(agent_id=body.agent, authenticated=True)
    mode: ApprovalMode = "decide_wait" if body.wait else "decide"
    call = _call(request.headers, caller, body.tool, body.arguments, "decide")
    if body.preview is not None:
        if body.preview.kind != "diff":
            raise BadRequest(f"preview.kind must be diff, not {body.preview.kind!r}")
        if len(body.preview.diff.encode()) + len(body.preview.path.encode()) > PREVIEW_MAX_BYTES:
            raise BadRequest(f"preview: at most {PREVIEW_MAX_BYTES} bytes (truncate the diff)")
        call.preview = msgspec.to_builtins(body.preview)
    out = await mesh.pipeline.run(call, mode=mode)
    action = out.policy if out.policy in ("allow", "deny", "human_approval") else "deny"
    if body.wait and out.approval_status:  # resolved by a human: approved runs, denied or timed out does not
        # (approved but over a limit when released: refused like any call over it)
        action = "allow" if out.approval_status == "approved" and out.policy != "rate_limited" else "deny"
    decision = Decision(
        action=action,
        rule=out.rule,
        reason=out.reason,
        agent=caller.agent_id,
        tool=body.tool,
        trace_id=out.trace_id,
    )
    if out.approval_id:
        decision.approval_id, decision.approval_status = out.approval_id, out.approval_status
    if out.approval_status == "denied":  # the reviewer's words reach the agent
        decision.reason = out.error
        if out.resolved_by:
            decision.resolved_by = out.resolved_by
    if out.halted:
        decision.halted = True
    if out.policy == "rate_limited":
        decision.error = out.error
        return Response(decision, status_code=429)
    if out.status == 408:
        decision.error = out.error
        return Response(decision, status_code=408)
    return Response(decision, status_code=403 if action == "deny" else 200)


@post(
    "/decide/{trace_id:str}/outcome",
    status_code=200,
    tags=["data plane"],
    security=AGENT,
    operation_class=json_body(DecideOutcome, required=True),
    responses=responses({200: ok(TraceView, "the trace entry, revised with the outcome")}, *BODY, 401, 403, 404, 409),
)
async def decide_outcome(request: Request[Any, Any, Any], trace_id: FromPath[str]) -> Response[bytes]:
    """What a call `/decide` allowed did when its caller ran it (shared/gate/decide_outcome.py)."""
    raw = await request.body()
    try:
        report = decode(raw or b"{}", type=OutcomeReport)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadRequest(f"invalid outcome: {e}") from None
    mesh = mesh_of(request)
    # The admin token may report for any agent; everyone else (loopback included) only for its own calls.
    admin = mesh.identity.holds_admin_token(request.headers.get("authorization"))
    agent_id = None if admin else caller_of(request).agent_id
    entry = await asyncio.to_thread(report_outcome, mesh, trace_id, agent_id, report)
    # The row was found a moment ago; were it gone since, its id alone (a Struct of the entry cannot say that).
    return json_response(entry_to_wire(entry) if entry is not None else {"trace_id": trace_id})


@get("/tools", tags=["data plane"], security=AGENT, responses=responses({}, 401))
async def list_tools(request: Request[Any, Any, Any]) -> list[ToolView]:
    caller = caller_or_admin(request)  # None: the admin (the console), who sees every tool
    mesh = mesh_of(request)
    tools = mesh.registry.tools()
    if mesh.settings.hide_denied_tools and caller is not None:
        current = mesh.policies.current
        tools = [t for t in tools if not current.can_only_deny(caller.agent_id, t.name)]
    return [t.view() for t in tools]


@get("/mcp-servers", tags=["data plane"], security=AGENT, responses=responses({}, 401))
async def mcp_servers(request: Request[Any, Any, Any]) -> list[McpServerView]:
    caller_or_admin(request)
    return mesh_of(request).registry.servers()


@get(
    "/tools/decisions",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    response_description="What each tool gets for that agent",
    responses=responses({}, 400, 401),
)
async def tool_decisions(request: Request[Any, Any, Any], agent: FromQuery[str] = "") -> list[ToolDecision]:
    if not agent:
        raise BadRequest("agent query parameter required")
    return mesh_of(request).tool_decisions(agent)


ROUTES = [call_tool, decide, decide_outcome, list_tools, mcp_servers, tool_decisions]
