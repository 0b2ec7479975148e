"""What enters the gate and what comes out: a `Call` from any transport, an `Outcome` each transport shapes."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.auth.identity import Caller
from flux7.shared.tracecontext import TraceContext

__all__ = ["ApprovalMode", "Call", "Outcome", "ToolResult"]

# How a human_approval is waited for (shared/gate/approval_flow.py):
# block: wait for the resolution (REST, MCP with supervisor.enabled); claim: MCP's non-blocking claim flow;
# decide: /decide, which never queues or forwards; decide_wait: /decide with `wait`, which queues a human_approval
# and waits for its resolution like block, but still never forwards (the caller runs the tool, then reports).
ApprovalMode = Literal["block", "claim", "decide", "decide_wait"]


class Call(msgspec.Struct, kw_only=True):
    caller: Caller
    tool: str
    arguments: Any
    trace: TraceContext
    session_id: str = ""
    callback_url: str = ""
    transport: str = "rest"
    # OpenTelemetry (the entry's `request`): known when the call came over MCP
    mcp_session_id: str = ""
    mcp_protocol_version: str = ""
    jsonrpc_id: str = ""
    # what the call would change, as its caller shows it to the human who approves it (/decide's `preview`)
    preview: Any = None


class Outcome(msgspec.Struct, kw_only=True):
    """What the gate decided and did. `status` is the REST status; transports shape their own replies."""

    status: int
    policy: str  # allow | deny | human_approval | rate_limited | halted | error
    trace_id: str
    rule: str = ""
    reason: str = ""
    error: str = ""
    result: Any = None
    has_result: bool = False
    approval_id: str = ""
    approval_status: str = ""  # approved | denied | timeout | pending (claim mode)
    resolved_by: str = ""
    reasoning: str = ""  # why the approval was decided so: the reviewer's words, passed back to the agent
    latency_ms: float = 0.0
    halted: bool = False
    halt_message: str = ""
    unknown_tool: bool = False

    def rest_body(self) -> ToolResult:
        return ToolResult(
            result=self.result if self.has_result else UNSET,
            trace_id=self.trace_id,
            approval_id=self.approval_id or UNSET,
            policy=self.policy,
            latency_ms=round(self.latency_ms, 3),
            error=self.error or UNSET,
        )


class ToolResult(msgspec.Struct, kw_only=True):
    """What POST /tool/{name} answers once the pipeline ran (CONTRACT 1.7), in wire order: `result` when the call was
    forwarded (null included), `approval_id` when it was queued, `error` when it failed or was refused."""

    result: Any | UnsetType = UNSET
    trace_id: str = ""
    approval_id: str | UnsetType = UNSET
    policy: str = ""  # allow | deny | human_approval | rate_limited | halted | error
    latency_ms: float = 0
    error: str | UnsetType = UNSET
