"""Wire shapes of the REST routes as msgspec Structs, for the OpenAPI document (CONTRACT 1.6-1.11, 2.1).

The handlers encode their answers themselves (the contract's exact bytes); these Structs describe those bodies to
Litestar's generator. Fields the contract marks optional have defaults, so they are not `required`; no Struct
forbids extra fields, so a newer field is never a schema violation."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "AcceptPins",
    "AcceptedPins",
    "ApprovalDecision",
    "ApprovalSettings",
    "ApprovalSettingsChange",
    "ApprovalSettingsChanged",
    "ApprovalView",
    "Decide",
    "DecideOutcome",
    "Decision",
    "ErrorBody",
    "ForgetPrecedents",
    "GrantRequest",
    "GrantView",
    "Halt",
    "HaltCreated",
    "HaltRequest",
    "HaltResumed",
    "Health",
    "JsonRpcMessage",
    "McpServer",
    "MemoryChain",
    "MemoryHealth",
    "PolicyEdit",
    "PolicyFileText",
    "Resolve",
    "ResolveRequest",
    "SnapshotReminder",
    "TokenRequest",
    "TokenView",
    "Tool",
    "ToolCall",
    "ToolResult",
    "TraceEntry",
    "TraceWhy",
    "Version",
]


class ErrorBody(msgspec.Struct):
    """The one error shape of the REST routes: `{"error": "<why>"}`."""

    error: str


# --- data plane ---


class ToolCall(msgspec.Struct):
    """`{"params": {...}}` is canonical; a body without a top-level `params` key is itself the arguments."""

    params: dict[str, Any] | None = None


class ToolResult(msgspec.Struct, kw_only=True):
    """Every answer of POST /tool/{name} (CONTRACT 1.7): `result` on a forwarded call, `error` otherwise (a 401
    is only `{error}`)."""

    policy: str = ""
    result: Any = None
    trace_id: str = ""
    approval_id: str = ""
    latency_ms: float = 0
    error: str = ""


class Decide(msgspec.Struct):
    tool: str
    arguments: Any = None
    agent: str = ""
    wait: bool = False  # hold a human_approval in the queue and answer once it is resolved


class DecideOutcome(msgspec.Struct, kw_only=True):
    """What a call `/decide` allowed did when its caller ran it (shared/gate/decide_outcome.py)."""

    ok: bool
    exit_code: int | None = None
    bytes: int = 0
    duration_ms: float = 0.0
    error: str = ""


class Decision(msgspec.Struct, kw_only=True):
    action: str = ""
    rule: str = ""
    reason: str = ""
    agent: str = ""
    tool: str = ""
    trace_id: str = ""
    halted: bool = False
    error: str = ""


class Tool(msgspec.Struct, kw_only=True):
    name: str
    description: str = ""
    source: str = ""
    method: str = ""
    path: str = ""
    base_url: str = ""
    params: list[dict[str, Any]] | None = None
    mcp_server: str = ""
    classification: dict[str, Any] | None = None


class McpServer(msgspec.Struct, kw_only=True):
    name: str
    transport: str = ""
    status: str = ""
    error: str = ""
    tools: list[str] | None = None


class Health(msgspec.Struct, kw_only=True):
    status: str  # "ok", or "degraded" with `problems`
    tools: int = 0
    traces: dict[str, Any] | None = None
    version: str = ""
    problems: list[str] | None = None  # what is wrong, one sentence each (only when degraded)


class Version(msgspec.Struct):
    version: str
    commit: str
    date: str


# --- traces ---


class TraceEntry(msgspec.Struct, kw_only=True):
    """A trace entry (CONTRACT 1.11); Go's omitempty drops zero values, `params` is always present."""

    trace_id: str
    agent_id: str = ""
    tool: str = ""
    params: Any = None
    policy: str = ""
    policy_rule: str = ""
    status_code: int = 0
    latency_ms: float = 0
    timestamp: str = ""
    session_id: str = ""
    error: str = ""


class TraceWhy(msgspec.Struct):
    trace_id: str
    chain_length: int
    chain: list[TraceEntry]


# --- approvals, precedents, grants, halts, tokens, policies, pins ---


class ApprovalView(msgspec.Struct, kw_only=True):
    id: str
    agent_id: str = ""
    tool: str = ""
    params: Any = None
    policy_rule: str = ""
    status: str = ""
    created_at: str = ""


class ResolveRequest(msgspec.Struct, kw_only=True):
    resolved_by: str = ""
    reasoning: str = ""
    confidence: float | None = None


class Resolve(msgspec.Struct):
    status: str
    id: str


class ApprovalSettingsChange(msgspec.Struct, kw_only=True):
    timeout_seconds: int | None = None
    wait_seconds: int | None = None
    auto_approve: bool | None = None
    min_approvals: int | None = None
    auto_approve_writes: bool | None = None
    by: str = ""


class ApprovalSettings(msgspec.Struct, kw_only=True):
    settings: dict[str, Any]
    config: str | None = None
    defaults: dict[str, Any] | None = None
    overrides: dict[str, Any] | None = None
    editable: bool = True
    precedent: dict[str, Any] | None = None


class ApprovalSettingsChanged(msgspec.Struct):
    changed: list[str]


class ApprovalDecision(msgspec.Struct, kw_only=True):
    """The precedents table (CONTRACT 1.6) or the forget answer: both objects, fields by case."""

    enabled: bool | None = None
    min_approvals: int | None = None
    reason: str = ""
    precedents: list[dict[str, Any]] | None = None


class ForgetPrecedents(msgspec.Struct, kw_only=True):
    tool: str = ""
    agent: str = ""


class GrantRequest(msgspec.Struct, kw_only=True):
    agent: str
    tools: str
    duration: str
    approval_id: str = ""
    trace_id: str = ""


class GrantView(msgspec.Struct, kw_only=True):
    id: str
    agent: str = ""
    tools: str = ""
    expires_at: str = ""
    remaining: str = ""
    granted_by: str = ""
    approval_id: str = ""
    trace_id: str = ""


class HaltRequest(msgspec.Struct, kw_only=True):
    scope: str = ""
    target: str = ""
    reason: str = ""
    by: str = ""


class Halt(msgspec.Struct, kw_only=True):
    id: str
    scope: str = ""
    target: str = ""
    reason: str = ""
    created_by: str = ""
    created_at: str = ""
    active: bool = True


class HaltCreated(msgspec.Struct, kw_only=True):
    halt: Halt
    revoked_grants: int = 0
    denied_approvals: int = 0
    already_active: bool = False


class HaltResumed(msgspec.Struct, kw_only=True):
    halt: Halt
    restored_grants: int = 0


class TokenRequest(msgspec.Struct, kw_only=True):
    agent: str
    note: str = ""
    expires: str = ""


class TokenView(msgspec.Struct, kw_only=True):
    """A per-agent token's record; `token` (the secret) only in the answer to its issue."""

    agent_id: str = ""
    state: str = ""
    token: str = ""


class PolicyEdit(msgspec.Struct, kw_only=True):
    action: str
    by: str = ""


class PolicyFileText(msgspec.Struct):
    text: str


class AcceptPins(msgspec.Struct, kw_only=True):
    tools: list[str] | None = None
    server: str = ""
    by: str = ""


class AcceptedPins(msgspec.Struct, kw_only=True):
    accepted: Any = None
    by: str = ""


# --- memory (mem7's routes inside the mesh) ---


class JsonRpcMessage(msgspec.Struct, kw_only=True):
    """One JSON-RPC 2.0 request, notification or answer (an object; batches are not accepted)."""

    jsonrpc: str = "2.0"
    id: Any = None
    method: str = ""
    params: Any = None


class MemoryHealth(msgspec.Struct, kw_only=True):
    status: str
    version: str = ""


class SnapshotReminder(msgspec.Struct, kw_only=True):
    reminder: str = ""
    workspace: str = ""
    memory_count: int = 0
    generated_at: str = ""


class MemoryChain(msgspec.Struct, kw_only=True):
    holds: bool
    report: Any = None
