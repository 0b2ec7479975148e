"""The wire types of the REST routes (CONTRACT 1.6-1.11, 2.1) as msgspec Structs: what the handlers return, so
Litestar's OpenAPI document describes what is actually sent.

The domain's views are defined beside their domain (shared/) and re-exported here; this module defines the shapes
only the edge makes (answers that combine several domain values) and the request bodies; the error bodies are
their renderer's (functions/errors.py). A field the contract always writes has no default (`required`); a field it
leaves out when empty has a default and its Struct `omit_defaults`, or is `UNSET` until set: where an empty value
must still be written when present, and for floats (msgspec leaves a field out when its value *is* the default
object, which a computed 0.0 is not). No Struct forbids extra fields in a response, so a newer field is never a
schema violation.

Where the answer stays a dict, described here or in the route by a Struct or `dict[str, Any]`: what the core makes
in shapes of its own (the governance engine, docs/governance.md; policy files and edits; the precedents' table and
explanations, `ApprovalDecision`; the trace chain report; OTLP JSON; the RFC 9728 document) and the memory
service's answers, which its JSON-RPC tools share (functions/memory.py). Request bodies are decoded by the handlers,
some more leniently than documented (/decide's `tool` is required here; missing, it gets its own 400 text)."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from flux7.functions.errors import ErrorBody, ToolRefusal, UnknownTool
from flux7.functions.memory import MemoryChain, MemoryHealth, SnapshotReminder
from flux7.shared.auth.tokens import TokenView
from flux7.shared.auth.users import UserView
from flux7.shared.gate.approval_settings import ApprovalPolicy
from flux7.shared.gate.approvals import ApprovalView
from flux7.shared.gate.call import ToolResult
from flux7.shared.gate.grants import GrantView
from flux7.shared.gate.halts import HaltView
from flux7.shared.gate.pins import PinView
from flux7.shared.mcp.messages import JsonRpcMessage
from flux7.shared.mesh import Health, ToolDecision
from flux7.shared.tracing import SessionView, TraceView
from flux7.shared.upstreams.base import ToolView
from flux7.shared.upstreams.mcp_upstream import McpServerView

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
    "DecisionsPage",
    "ErrorBody",
    "ForgetPrecedents",
    "GrantRequest",
    "GrantView",
    "HaltCreated",
    "HaltRequest",
    "HaltResumed",
    "HaltView",
    "Health",
    "JsonRpcMessage",
    "McpServerView",
    "MemoryChain",
    "MemoryHealth",
    "PinView",
    "PolicyEdit",
    "PolicyFileText",
    "PrecedentSettings",
    "Resolve",
    "ResolveRequest",
    "SessionView",
    "SnapshotReminder",
    "TokenRequest",
    "TokenView",
    "ToolCall",
    "ToolDecision",
    "ToolRefusal",
    "ToolResult",
    "ToolView",
    "TraceView",
    "TraceWhy",
    "UnknownTool",
    "UserView",
    "Version",
]


# --- data plane ---


# --- data plane ---


class ToolCall(msgspec.Struct):
    """`{"params": {...}}` is canonical; a body without a top-level `params` key is itself the arguments."""

    params: dict[str, Any] | None = None


class Decide(msgspec.Struct):
    tool: str
    arguments: Any = None
    agent: str = ""
    wait: bool = False  # hold a human_approval in the queue and answer once it is resolved
    preview: dict[str, str] | None = None  # `{kind: "diff", path, diff}`: shown beside the approval


class DecideOutcome(msgspec.Struct, kw_only=True):
    """What a call `/decide` allowed did when its caller ran it (shared/gate/decide_outcome.py)."""

    ok: bool
    exit_code: int | None = None
    bytes: int = 0
    duration_ms: float = 0.0
    error: str = ""


class Decision(msgspec.Struct, kw_only=True):
    """What /decide answers (CONTRACT 1.6): 200 for allow or human_approval, 403 for deny (a halt adds `halted`),
    408 and 429 with `error`; with `wait`, the approval and how it was resolved."""

    action: str  # allow | deny | human_approval
    rule: str
    reason: str
    agent: str
    tool: str
    trace_id: str
    approval_id: str | UnsetType = UNSET
    approval_status: str | UnsetType = UNSET
    resolved_by: str | UnsetType = UNSET
    halted: bool | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Version(msgspec.Struct):
    version: str
    commit: str
    date: str


# --- traces ---


class TraceWhy(msgspec.Struct):
    trace_id: str
    chain_length: int
    chain: list[TraceView]  # oldest first


# --- approvals, precedents, grants, halts, tokens, policies, pins ---


class ResolveRequest(msgspec.Struct, kw_only=True):
    resolved_by: str = ""
    reasoning: str = ""
    confidence: float | None = None


class Resolve(msgspec.Struct, kw_only=True):
    """An approval resolved, a grant revoked: `{status, id}`; with four eyes, how far the approval is."""

    status: str
    id: str
    approvals: int | UnsetType = UNSET
    required_approvals: int | UnsetType = UNSET


class DecisionsPage(msgspec.Struct, kw_only=True):
    """GET /approvals/decisions: settled approvals, filtered and paged on the server."""

    decisions: list[ApprovalView]
    total: int
    limit: int
    offset: int


class ApprovalSettingsChange(msgspec.Struct, kw_only=True):
    timeout_seconds: int | None = None
    wait_seconds: int | None = None
    auto_approve: bool | None = None
    min_approvals: int | None = None
    auto_approve_writes: bool | None = None
    by: str = ""


class PrecedentSettings(msgspec.Struct, kw_only=True):
    enabled: bool
    min_approvals: int
    auto_approve_writes: bool


class ApprovalSettings(msgspec.Struct, kw_only=True):
    """GET /approvals/settings: in force, as configured, the overrides stored, and the precedent rule's part."""

    settings: ApprovalPolicy
    config: str  # the config file
    defaults: ApprovalPolicy
    overrides: dict[str, Any]
    editable: bool
    precedent: PrecedentSettings


class ApprovalSettingsChanged(msgspec.Struct):
    changed: list[str]


class ApprovalDecision(msgspec.Struct, kw_only=True):
    """The precedents table (CONTRACT 1.6) or the forget answer: both objects, fields by case (shared/decisions/
    precedents.py answers them as dicts)."""

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


class HaltRequest(msgspec.Struct, kw_only=True):
    scope: str = ""
    target: str = ""
    reason: str = ""
    by: str = ""


class HaltCreated(msgspec.Struct, kw_only=True):
    halt: HaltView
    revoked_grants: int
    denied_approvals: int
    already_active: bool | UnsetType = UNSET  # 200: an identical stop was in force


class HaltResumed(msgspec.Struct, kw_only=True):
    halt: HaltView
    restored_grants: int


class TokenRequest(msgspec.Struct, kw_only=True):
    agent: str
    note: str = ""
    expires: str = ""


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
    accepted: list[str]  # the tools whose pin changed
    by: str
