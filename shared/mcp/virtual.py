"""The mesh's own MCP tools (CONTRACT 1.14): `grant.list` and `mesh.catalog` for every agent;
`approval.pending`, `approval.resolve`, `grant.create` and `grant.revoke` for agents matching
`supervisor.supervisor_agents`.

They skip the policy (they are the mesh's control surface, not upstream tools); the operator-only ones are
refused to other agents before they get here."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from flux7.shared.auth.identity import Caller
from flux7.shared.durations import parse_duration
from flux7.shared.errors import Flux7Error
from flux7.shared.gate.grants import MCP_MAX_SECONDS
from flux7.shared.gate.pipeline import Call
from flux7.shared.globs import glob_match
from flux7.shared.mcp import texts
from flux7.shared.tracecontext import TraceContext, new_span_id

if TYPE_CHECKING:
    from flux7.shared.mcp.server import McpServer, RequestContext
    from flux7.shared.mesh import Mesh

__all__ = ["OPERATOR_ONLY", "VirtualTools"]

_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}

_EVERYONE: list[dict[str, Any]] = [
    {
        "name": "grant.list",
        "description": "List the active grants: temporary permissions that let an agent call tools that "
        "otherwise need human approval.",
        "inputSchema": _EMPTY,
    },
    {
        "name": "mesh.catalog",
        "description": "Describe every tool the mesh governs, grouped by source, with the action the policy "
        "takes for you (evaluated with empty arguments).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "source": {
                    "type": "string",
                    "description": "only this source: mcp, cli, openapi or virtual",
                    "enum": ["mcp", "cli", "openapi", "virtual"],
                }
            },
        },
    },
]

_SUPERVISORS: list[dict[str, Any]] = [
    {
        "name": "approval.resolve",
        "description": "Approve or deny a pending approval by id (full id or its first 8 characters). "
        "Approving a non-blocking MCP request replays the call and returns its result.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "the approval id or an 8-character prefix"},
                "decision": {"type": "string", "enum": ["approve", "deny"], "description": "approve or deny"},
            },
            "required": ["id", "decision"],
        },
    },
    {"name": "approval.pending", "description": "List the pending approval requests.", "inputSchema": _EMPTY},
    {
        "name": "grant.create",
        "description": "Let an agent call tools matching a glob without approval for a while (at most 24h).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "agent": {
                    "type": "string",
                    "description": "agent glob (default: the approval's agent, else you)",
                },
                "tools": {"type": "string", "description": "tool glob, e.g. fs.read_*"},
                "duration": {"type": "string", "description": "Go duration, e.g. 30m or 2h (capped at 24h)"},
                "approval_id": {"type": "string", "description": "the approval this grant follows from"},
                "trace_id": {"type": "string", "description": "the trace this grant follows from"},
            },
            "required": ["tools", "duration"],
        },
    },
    {
        "name": "grant.revoke",
        "description": "Revoke an active grant by id (or a prefix of at least 4 characters).",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "the grant id"}},
            "required": ["id"],
        },
    },
]

OPERATOR_ONLY = frozenset(t["name"] for t in _SUPERVISORS)
NAMES = frozenset(t["name"] for t in (*_EVERYONE, *_SUPERVISORS))


def _arg(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    return value.strip() if isinstance(value, str) else ""


def _actor(caller: Caller) -> str:
    """A supervisor's decisions are recorded under its proven id; a claim believed in the open-loopback trust
    mode keeps the reference's `mcp:<agent>`."""
    return f"supervisor:{caller.agent_id}" if caller.verified else f"mcp:{caller.agent_id}"


class VirtualTools:
    names = NAMES

    def __init__(self, mesh: Mesh, server: McpServer) -> None:
        self.mesh = mesh
        self.server = server

    def entries(self, caller: Caller) -> list[dict[str, Any]]:
        out = [dict(t) for t in _EVERYONE]
        if self.mesh.identity.is_supervisor(caller):
            out.extend(dict(t) for t in _SUPERVISORS)
        return out

    # -- approvals nobody blocks on (approval.resolve replays them) ---------------------------------

    def remember_claimable(self, approval_id: str) -> None:
        """A non-blocking MCP request: nobody waits on it, so approving it through `approval.resolve` may
        replay it. A request some REST caller blocks on is never recorded here, so it never runs twice."""
        self.mesh.db.execute(
            "INSERT INTO mcp_claimable (approval_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (approval_id, time.time()),
        )

    def claimable(self, approval_id: str) -> bool:
        row = self.mesh.db.query_one("SELECT 1 FROM mcp_claimable WHERE approval_id = ?", (approval_id,))
        return row is not None

    # -- calls -----------------------------------------------------------------------------------------

    async def call(
        self, name: str, arguments: dict[str, Any], ctx: RequestContext, trace: TraceContext
    ) -> dict[str, Any]:
        try:
            if name == "grant.list":
                return self._grant_list(ctx.caller)
            if name == "mesh.catalog":
                return texts.text_result(texts.go_indent(self.catalog(ctx.caller, _arg(arguments, "source"))))
            if name == "approval.pending":
                return self._pending()
            if name == "approval.resolve":
                return await self._resolve(arguments, ctx, trace)
            if name == "grant.create":
                return self._grant_create(arguments, ctx, trace)
            return self._grant_revoke(arguments, ctx)
        except Flux7Error as e:  # a refused control action is the tool's failure, not a protocol error
            return texts.text_result(e.message, is_error=True)

    def _grant_list(self, caller: Caller) -> dict[str, Any]:
        grants = self.mesh.grants.active()
        if not self.mesh.identity.is_supervisor(caller):  # others see only what applies to them
            grants = [g for g in grants if glob_match(g.agent, caller.agent_id)]
        return texts.text_result(texts.go_indent(msgspec.to_builtins([g.view() for g in grants])))

    def catalog(self, caller: Caller, source: str = "") -> dict[str, Any]:
        """`{summary, groups:{key:{source, runtime?, count, tools:[{name, description, action}]}}}`."""
        mesh = self.mesh
        transports = {m.name: m.transport for m in mesh.settings.mcp_servers}
        groups: dict[str, dict[str, Any]] = {}
        agent = caller.agent_id
        for tool in self.server.visible_tools(agent):
            if tool.source == "mcp":
                key, runtime = tool.mcp_server or "mcp", transports.get(tool.mcp_server, "")
            elif tool.source == "cli":
                key = tool.name.split(".", 1)[0]
                runtime = str((tool.cli_meta or {}).get("bin") or "")
            else:
                key, runtime = urlsplit(tool.base_url).netloc or tool.source, ""
            group = groups.setdefault(key, {"source": tool.source, "count": 0, "tools": []})
            if runtime:
                group["runtime"] = runtime
            action = mesh.pipeline.decider.evaluate(agent, tool.name, {}, tool).action
            group["tools"].append({"name": tool.name, "description": tool.description, "action": action})
        virtual = groups.setdefault("mesh", {"source": "virtual", "count": 0, "tools": []})
        for entry in self.entries(caller):
            virtual["tools"].append({"name": entry["name"], "description": entry["description"], "action": "allow"})
        if source:
            groups = {k: g for k, g in groups.items() if g["source"] == source}
        for g in groups.values():
            g["count"] = len(g["tools"])
        total = sum(g["count"] for g in groups.values())
        return {"summary": f"{total} tools across {len(groups)} sources", "groups": groups}

    def _pending(self) -> dict[str, Any]:
        approvals = self.mesh.approvals
        pending = approvals.query("pending")
        if not pending:
            return texts.text_result("No pending approvals.")
        expose = approvals.expose_content
        lines = [f"{len(pending)} pending approval(s):"]
        for a in pending:
            view = a.view(expose_content=expose)
            risk = " [injection risk]" if a.injection_risk else ""
            lines.append(
                f"- {a.id[:8]} {a.tool} by {a.agent_id} (rule {a.policy_rule}, {view.remaining or '0s'} left)"
                f"{risk}\n  params: {msgspec.json.encode(view.params).decode()}"
            )
        return texts.text_result("\n".join(lines))

    async def _resolve(self, arguments: dict[str, Any], ctx: RequestContext, trace: TraceContext) -> dict[str, Any]:
        key, decision = _arg(arguments, "id"), _arg(arguments, "decision")
        if not key:
            return texts.text_result("id is required", is_error=True)
        if decision not in ("approve", "deny"):
            return texts.text_result("decision must be approve or deny", is_error=True)
        approvals = self.mesh.approvals
        agent = ctx.caller.agent_id
        resolved = approvals.resolve(key, decision, resolved_by=_actor(ctx.caller), resolver=agent)
        short = resolved.id[:8]
        if decision == "deny":
            return texts.text_result(f"Denied (id: {short}) for {resolved.tool}.")
        if not self.claimable(resolved.id):
            return texts.text_result(f"Approved (id: {short}) for {resolved.tool}; the waiting caller runs it.")
        # Replay the very call, as its agent: the claim flow uses the approval up, so it runs once.
        replay = Call(
            caller=Caller(agent_id=resolved.agent_id, authenticated=True),
            tool=resolved.tool,
            arguments=resolved.params if isinstance(resolved.params, dict) else {},
            trace=TraceContext(trace_id=resolved.trace_id or trace.trace_id, span_id=new_span_id()),
            session_id=resolved.session_id,
            transport=ctx.transport,
            mcp_session_id=ctx.mcp_session_id,
            mcp_protocol_version=ctx.protocol_version,
            jsonrpc_id=ctx.jsonrpc_id,
        )
        return await self.server.run(replay, ctx.terminal)

    def _grant_create(self, arguments: dict[str, Any], ctx: RequestContext, trace: TraceContext) -> dict[str, Any]:
        tools, duration_text = _arg(arguments, "tools"), _arg(arguments, "duration")
        approval_id, trace_id = _arg(arguments, "approval_id"), _arg(arguments, "trace_id")
        if not tools or not duration_text:
            return texts.text_result("agent, tools, and duration are required", is_error=True)
        try:
            seconds = parse_duration(duration_text)
        except ValueError as e:
            return texts.text_result(f"invalid duration: {e}", is_error=True)
        if seconds <= 0:
            return texts.text_result("invalid duration: must be positive", is_error=True)
        agent = _arg(arguments, "agent")
        if not agent and approval_id:
            agent = self.mesh.approvals.get(approval_id).agent_id
        grant = self.mesh.grants.create(
            agent or ctx.caller.agent_id,
            tools,
            seconds,
            _actor(ctx.caller),
            approval_id=approval_id,
            trace_id=trace_id or trace.trace_id,
            grantor=ctx.caller.agent_id,
            max_seconds=MCP_MAX_SECONDS,
        )
        return texts.text_result(texts.go_indent(msgspec.to_builtins(grant.view())))

    def _grant_revoke(self, arguments: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        key = _arg(arguments, "id")
        if not key:
            return texts.text_result("id is required", is_error=True)
        grant = self.mesh.grants.revoke(key, by=_actor(ctx.caller))
        return texts.text_result(f"Grant {grant.id} revoked.")
