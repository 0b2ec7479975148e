"""The mesh as an MCP server, independent of its transport: method dispatch over the one pipeline.

Streamable HTTP (functions/mcp.py) and stdio (shared/mcp/stdio.py) decode a message, resolve the caller and
the session, and hand both here; `tools/call` becomes a pipeline `Call`, so governance is REST's
(docs/mcp.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from flux7.shared.auth.identity import Caller
from flux7.shared.gate.pipeline import ApprovalMode, Call, Outcome
from flux7.shared.gate.tty_prompt import TerminalChannel
from flux7.shared.mcp import texts
from flux7.shared.mcp.messages import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MODERN_VERSIONS,
    SERVER_INFO,
    SERVER_INFO_META_KEY,
    McpError,
    Message,
    negotiate_handshake,
)
from flux7.shared.mcp.shapes import outcome_result, tool_entry
from flux7.shared.mcp.virtual import OPERATOR_ONLY, VirtualTools
from flux7.shared.tracecontext import from_headers
from flux7.shared.upstreams.base import ToolDef

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["McpServer", "RequestContext"]

log = logging.getLogger("flux7.mcp")


class RequestContext(msgspec.Struct, kw_only=True):
    """What the transport knows about one message: who sends it, in which session and era."""

    caller: Caller
    session_id: str = ""
    modern: bool = False
    traceparent: str | None = None  # the HTTP header, when there is one
    x_trace_id: str | None = None
    transport: str = "mcp"
    # OpenTelemetry (mcp.session.id, mcp.protocol.version, jsonrpc.request.id of the SERVER span)
    mcp_session_id: str = ""  # an MCP session: Mcp-Session-Id, or the stdio session
    protocol_version: str = ""
    jsonrpc_id: str = ""
    terminal: TerminalChannel | None = None  # the tty approval channel (stdio only: shared/gate/tty_prompt.py)


def _modern(result: dict[str, Any], *, cacheable: bool = False) -> dict[str, Any]:
    """Stateless-era results name their type; cacheable ones are private (they depend on the caller)."""
    result["resultType"] = "complete"
    if cacheable:
        result["cacheScope"] = "private"
        result["ttlMs"] = 0
    return result


class McpServer:
    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.virtual = VirtualTools(mesh, self)

    async def handle(self, msg: Message, ctx: RequestContext) -> dict[str, Any] | None:
        """The result of a request (McpError for a protocol error), or None for a notification."""
        if msg.is_notification or msg.is_response:
            return None
        method = msg.method
        params = msg.params if isinstance(msg.params, dict) else {}
        if method == "tools/call":
            if msg.id is not None and not ctx.jsonrpc_id:
                ctx = msgspec.structs.replace(ctx, jsonrpc_id=str(msg.id))
            result = await self.call_tool(params, ctx)
            return _modern(result) if ctx.modern else result
        if method == "tools/list":
            listed: dict[str, Any] = {"tools": self.list_tools(ctx.caller)}
            return _modern(listed, cacheable=True) if ctx.modern else listed
        if method == "initialize":
            return {
                "protocolVersion": negotiate_handshake(params.get("protocolVersion")),
                "capabilities": {"tools": {}},
                "serverInfo": dict(SERVER_INFO),
            }
        if method == "server/discover":
            return _modern(
                {
                    "supportedVersions": list(MODERN_VERSIONS),
                    "capabilities": {"tools": {}},
                    "_meta": {SERVER_INFO_META_KEY: dict(SERVER_INFO)},
                },
                cacheable=True,
            )
        if method == "ping":
            return _modern({}) if ctx.modern else {}
        raise McpError(METHOD_NOT_FOUND, f"Method not found: {method}")

    # -- tools/list ----------------------------------------------------------------------------------------

    def visible_tools(self, agent: str) -> list[ToolDef]:
        """The registry's tools, less (with hide_denied_tools) those that policy and floors can only deny."""
        mesh = self.mesh
        tools = mesh.registry.tools()
        if not mesh.settings.hide_denied_tools:
            return list(tools)
        current = mesh.policies.current
        out: list[ToolDef] = []
        for tool in tools:
            if current.can_only_deny(agent, tool.name):
                continue
            floor = mesh.pipeline.decider.floor_for(tool)
            if floor is not None and floor.action == "deny":
                continue
            out.append(tool)
        return out

    def list_tools(self, caller: Caller) -> list[dict[str, Any]]:
        shape = self.mesh.settings.mcp.result_shape
        entries = [tool_entry(t, shape) for t in self.visible_tools(caller.agent_id)]
        entries.extend(self.virtual.entries(caller))
        return entries

    # -- tools/call ----------------------------------------------------------------------------------------

    async def call_tool(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise McpError(INVALID_PARAMS, "Missing tool name")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise McpError(INVALID_PARAMS, "arguments must be an object")
        meta: dict[str, Any] = params["_meta"] if isinstance(params.get("_meta"), dict) else {}
        traceparent = meta.get("traceparent") if isinstance(meta.get("traceparent"), str) else None
        trace = from_headers(traceparent or ctx.traceparent, ctx.x_trace_id)
        agent = ctx.caller.agent_id
        if name in self.virtual.names:
            if name in OPERATOR_ONLY and not self.mesh.identity.is_supervisor(ctx.caller):
                raise McpError(
                    METHOD_NOT_FOUND,
                    f"{name} is operator-only — not callable by this agent. Only agents matching "
                    "supervisor.supervisor_agents and proven by their own token (flux7 token issue) or a JWT may "
                    "use it; ask an operator to resolve approvals.",
                )
            halt = self.mesh.halts.active_for(agent, ctx.session_id)
            if halt is not None:
                return texts.text_result(halt.message, is_error=True)
            return await self.virtual.call(name, arguments, ctx, trace)
        call = Call(
            caller=ctx.caller,
            tool=name,
            arguments=arguments,
            trace=trace,
            session_id=ctx.session_id,
            transport=ctx.transport,
            mcp_session_id=ctx.mcp_session_id,
            mcp_protocol_version=ctx.protocol_version,
            jsonrpc_id=ctx.jsonrpc_id,
        )
        return await self.run(call, ctx.terminal)

    async def run(self, call: Call, terminal: TerminalChannel | None = None) -> dict[str, Any]:
        """One governed call through the pipeline, shaped as a tools/call result. `terminal`: the tty approval
        channel the stdio transport brings."""
        mode: ApprovalMode = "block" if self.mesh.settings.supervisor.enabled else "claim"
        out = await self.mesh.pipeline.run(call, mode=mode, terminal=terminal)
        if out.unknown_tool:
            raise McpError(INVALID_PARAMS, f"Unknown tool: {call.tool}")
        if mode == "claim" and out.approval_status == "pending" and out.approval_id:
            self.virtual.remember_claimable(out.approval_id)
        return self.shape(out, call.tool)

    def shape(self, out: Outcome, tool: str) -> dict[str, Any]:
        """An Outcome as a tools/call result, in the configured shape (shapes.py)."""
        return outcome_result(
            out,
            self.mesh.registry.lookup(tool),
            tool,
            lambda: self._valid_seconds(out.approval_id),
            self.mesh.settings.mcp.result_shape,
        )

    def _valid_seconds(self, approval_id: str) -> int:
        try:
            return round(self.mesh.approvals.get(approval_id).remaining())
        except Exception:  # a vanished approval: report the configured validity
            return round(self.mesh.settings.approval.timeout_seconds)
