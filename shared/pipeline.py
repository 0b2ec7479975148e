"""The one pipeline every transport enters (DESIGN "One pipeline for every transport").

halt -> lookup -> rate limit / loop -> policy + floors -> grant -> precedents -> approval queue -> upstream -> trace.
REST, /decide and MCP (HTTP and stdio) build a `Call` and get an `Outcome`; only the approval step differs by mode."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from .identity import Caller
from .metrics import CallSample
from .policy import Decision, stricter
from .tracecontext import TraceContext
from .upstreams.base import CallContext, ToolDef, UpstreamResult

__all__ = ["ApprovalMode", "Call", "Outcome", "Pipeline"]

log = logging.getLogger("flux7.pipeline")

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


class Outcome(msgspec.Struct, kw_only=True):
    """What the pipeline decided and did. `status` is the REST status; transports shape their own replies."""

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
    latency_ms: float = 0.0
    halted: bool = False
    halt_message: str = ""
    unknown_tool: bool = False

    def rest_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.has_result:
            body["result"] = self.result
        body["trace_id"] = self.trace_id
        if self.approval_id:
            body["approval_id"] = self.approval_id
        body["policy"] = self.policy
        body["latency_ms"] = round(self.latency_ms, 3)
        if self.error:
            body["error"] = self.error
        return body


def _now_rfc3339() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _estimate_tokens(value: Any) -> int:
    if value is None:
        return 0
    try:
        return len(msgspec.json.encode(value)) // 4
    except TypeError:
        return len(str(value)) // 4


class Pipeline:
    def __init__(self, mesh: Any) -> None:
        self.mesh = mesh

    # -- decisions ------------------------------------------------------------------------------------

    def floor_for(self, tool: ToolDef | None) -> Decision | None:
        """Floors (CONTRACT 1.3): a CLI dispatcher's default_action, a pin's status."""
        floors: list[Decision] = []
        if tool is not None and tool.source == "cli" and tool.cli_meta:
            default = str(tool.cli_meta.get("default_action") or "")
            if tool.name.endswith(".__dispatch"):
                action = default or "deny"
                floors.append(Decision(action, f"cli:{tool.name}", f"cli default_action={action}"))
        pins = getattr(self.mesh, "pins", None)
        if pins is not None and tool is not None:
            pin_floor = pins.floor_for(tool)
            if pin_floor is not None:
                floors.append(pin_floor)
        best: Decision | None = None
        for f in floors:
            best = f if best is None else stricter(best, f)
        return best

    def evaluate(self, agent: str, tool_name: str, arguments: Any, tool: ToolDef | None) -> Decision:
        decision = self.mesh.policies.current.decide(agent, tool_name, arguments)
        return stricter(decision, self.floor_for(tool))

    # -- the pipeline ------------------------------------------------------------------------------------

    def _stop_here(
        self, call: Call, start: float, status: int, policy: str, rule: str, reason: str, **kw: Any
    ) -> Outcome:
        """An outcome that ends the pipeline before the upstream: built, traced, returned."""
        out = Outcome(status=status, policy=policy, trace_id=call.trace.trace_id, rule=rule, reason=reason, **kw)
        self._trace(call, out, start)
        return out

    async def run(self, call: Call, mode: ApprovalMode = "block") -> Outcome:
        start = time.perf_counter()
        mesh = self.mesh
        agent = call.caller.agent_id

        # 1. emergency stop, before everything else
        halts = getattr(mesh, "halts", None)
        halt = halts.active_for(agent, call.session_id) if halts is not None else None
        if halt is not None:
            msg = halt.message
            return self._stop_here(
                call, start, 403, "halted", f"halt:{halt.id}", msg, error=msg, halted=True, halt_message=msg
            )

        # 2. lookup (no trace for an unknown tool); /decide governs tools the caller runs itself
        tool = mesh.registry.lookup(call.tool)
        if tool is None and mode not in ("decide", "decide_wait"):
            return Outcome(
                status=404,
                policy="error",
                trace_id=call.trace.trace_id,
                error=f"unknown tool: {call.tool}",
                unknown_tool=True,
            )

        # 4, evaluated first: limits are keyed by the name of the policy that decides
        decision = self.evaluate(agent, call.tool, call.arguments, tool)
        policy = mesh.policies.current.by_name.get(decision.rule)

        # 3. rate limit and loop detection, on every transport (DESIGN decision 4)
        limits = getattr(mesh, "limits", None)
        if limits is not None and decision.action != "deny":
            limited = limits.check(agent, policy, call.tool, call.arguments)
            if limited:
                return self._stop_here(call, start, 429, "rate_limited", decision.rule, limited, error=limited)

        if decision.action == "deny":
            return self._stop_here(call, start, 403, "deny", decision.rule, decision.reason, error=decision.reason)

        grant = None
        if decision.action == "human_approval":
            decision, grant = await self._lift(call, decision, tool)

        if mode == "decide_wait" and decision.action == "human_approval" and getattr(mesh, "approvals", None):
            resolved, refused = await self._block_flow(call, decision, tool, start)
            if refused is not None:
                return refused
            if limits is not None:
                limits.record(agent, policy, call.tool, call.arguments)
            out = Outcome(
                status=200,
                policy="human_approval",
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
                approval_id=resolved.id,
                approval_status="approved",
                resolved_by=resolved.resolved_by,
            )
            self._trace_update_after_approval(call, out, resolved, None, start, tool=tool)
            return out
        if mode in ("decide", "decide_wait"):
            if limits is not None and decision.action == "allow":
                limits.record(agent, policy, call.tool, call.arguments)
            out = Outcome(
                status=200,
                policy=decision.action,
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
            )
            self._trace(call, out, start, grant=grant)
            return out
        assert tool is not None  # only /decide reaches here without a registered tool

        approval = None
        if decision.action == "human_approval":
            # 7. the approval queue
            approvals = getattr(mesh, "approvals", None)
            if approvals is None:
                error = "approval queue not available: human_approval denies (fail closed)"
                return self._stop_here(call, start, 403, "human_approval", decision.rule, decision.reason, error=error)
            if mode == "claim":
                approval = approvals.claim_approved(agent, call.tool, call.arguments)
                if approval is None:
                    return await self._claim_flow(call, decision, tool, start)
            else:
                approval, refused = await self._block_flow(call, decision, tool, start)
                if refused is not None:
                    return refused

        # 8. the upstream call
        if limits is not None:
            limits.record(agent, policy, call.tool, call.arguments)
        upstream, upstream_s = await self._forward(call, tool)
        if not upstream.error and upstream.status_code >= 400 and tool.source != "cli":
            # A gateway answers 502 when the backend fails; the backend's own status stays in the trace.
            upstream.error = f"backend returned HTTP {upstream.status_code}"
        if upstream.timed_out:
            status = 504  # the upstream did not answer in its configured time (docs/upstreams.md)
        elif upstream.error:
            status = upstream.status_code if tool.source == "cli" and upstream.status_code >= 400 else 502
        else:
            status = 200
        out = Outcome(
            status=status,
            policy="human_approval" if approval is not None else "allow",
            trace_id=call.trace.trace_id,
            rule=decision.rule,
            reason=decision.reason,
            error=upstream.error,
            result=upstream.result,
            has_result=upstream.result is not None or not upstream.error,
            approval_id=approval.id if approval is not None else "",
            approval_status="approved" if approval is not None else "",
            resolved_by=approval.resolved_by if approval is not None else "",
        )
        if approval is not None and mode != "claim":
            self._trace_update_after_approval(call, out, approval, upstream, start, tool=tool, upstream_s=upstream_s)
        else:
            self._trace(
                call, out, start, grant=grant, upstream=upstream, approval=approval, upstream_s=upstream_s, tool=tool
            )
        return out

    async def _lift(self, call: Call, decision: Decision, tool: ToolDef | None) -> tuple[Decision, Any]:
        """Steps 5 and 6: a grant, then precedents from memory, may turn human_approval into allow."""
        agent = call.caller.agent_id
        grants = getattr(self.mesh, "grants", None)
        grant = grants.find(agent, call.tool) if grants is not None else None
        if grant is not None:
            return Decision("allow", f"grant:{grant.id}", f"grant {grant.id} covers {call.tool}"), grant
        precedents = getattr(self.mesh, "precedents", None)
        if precedents is not None and tool is not None:
            verdict = await precedents.check(agent, tool, call.arguments)
            if verdict is not None:
                return Decision("allow", "supervisor:mem7", verdict), None
        return decision, None

    async def _forward(self, call: Call, tool: ToolDef) -> tuple[UpstreamResult, float]:
        """The upstream's result and how long it took (seconds)."""
        ctx = CallContext(
            trace_id=call.trace.trace_id,
            traceparent=call.trace.traceparent,
            agent_id=call.caller.agent_id,
            session_id=call.session_id,
        )
        started = time.perf_counter()
        try:
            upstream: UpstreamResult = await self.mesh.registry.call(
                tool, call.arguments if call.arguments is not None else {}, ctx
            )
        except Exception as e:  # an upstream fault is the call's result, never the server's
            log.warning("upstream call %s failed: %s", call.tool, e)
            upstream = UpstreamResult(status_code=502, error=str(e) or e.__class__.__name__)
        return upstream, time.perf_counter() - started

    def _submit(self, call: Call, decision: Decision) -> Any:
        return self.mesh.approvals.submit(
            agent=call.caller.agent_id,
            tool=call.tool,
            arguments=call.arguments,
            trace_id=call.trace.trace_id,
            policy_rule=decision.rule,
            policy_version=self.mesh.policies.current.version,
            session_id=call.session_id,
            callback_url=call.callback_url,
        )

    def _approval_setting(self, name: str) -> float:
        approvals = self.mesh.approvals
        runtime = approvals.effective_settings() if hasattr(approvals, "effective_settings") else None
        return float(getattr(runtime, name, getattr(self.mesh.settings.approval, name)))

    async def _block_flow(
        self, call: Call, decision: Decision, tool: ToolDef | None, start: float
    ) -> tuple[Any, Outcome | None]:
        """REST (and MCP with supervisor.enabled): queue the call and wait for its resolution."""
        approval = self._submit(call, decision)
        pending = Outcome(
            status=202,
            policy="human_approval",
            trace_id=call.trace.trace_id,
            rule=decision.rule,
            reason=decision.reason,
            approval_id=approval.id,
        )
        self._trace(call, pending, start, final=False)  # the call's metrics come with its resolution
        resolved = await self.mesh.approvals.wait(approval.id, self._approval_setting("timeout_seconds"))
        if resolved.status == "approved":
            return resolved, None
        denied = resolved.status == "denied"
        out = Outcome(
            status=403 if denied else 408,
            policy="human_approval",
            trace_id=call.trace.trace_id,
            rule=decision.rule,
            reason=decision.reason,
            error=f"approval denied by {resolved.resolved_by}" if denied else "approval timed out",
            approval_id=resolved.id,
            approval_status="denied" if denied else "timeout",
            resolved_by=resolved.resolved_by,
        )
        self._trace_update_after_approval(call, out, resolved, None, start, tool=tool)
        return resolved, out

    async def _claim_flow(self, call: Call, decision: Decision, tool: ToolDef, start: float) -> Outcome:
        """MCP, non-blocking: a denied claim, an existing pending request, or a new one (CONTRACT 1.14)."""
        approvals = self.mesh.approvals
        agent = call.caller.agent_id

        def answer(approval: Any, status: int, approval_status: str) -> Outcome:
            return Outcome(
                status=status,
                policy="human_approval",
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
                approval_id=approval.id,
                approval_status=approval_status,
                resolved_by=approval.resolved_by or "",
            )

        denied = approvals.find_denied(agent, call.tool, call.arguments)
        if denied is not None:
            return answer(denied, 403, "denied")
        pending = approvals.find_pending(agent, call.tool, call.arguments)
        if pending is not None:
            return answer(pending, 202, "pending")
        pending = self._submit(call, decision)
        out = answer(pending, 202, "pending")
        self._trace(call, out, start)
        asked = await self._ask_terminal(call, pending)
        if asked == "approved":
            return await self.run(call, mode="claim")
        if asked == "denied":
            return answer(approvals.get(pending.id), 403, "denied")
        wait_s = self._approval_setting("wait_seconds")
        if wait_s > 0:
            resolved = await approvals.wait_briefly(pending.id, wait_s)
            if resolved is not None and resolved.status == "approved":
                return await self.run(call, mode="claim")
            if resolved is not None and resolved.status == "denied":
                return answer(resolved, 403, "denied")
        return out

    async def _ask_terminal(self, call: Call, pending: Any) -> str:
        """The `tty` channels (CONTRACT 1.14 step 1), for the stdio transport only: ask the person at the
        terminal. `tty` without a terminal denies; `tty-fallback` leaves the approval to the queue."""
        channel = self.mesh.settings.approval.channel
        if call.transport != "stdio" or channel == "queue":
            return ""
        approvals = self.mesh.approvals
        from . import tty_prompt

        answer = None
        if tty_prompt.available():
            view = pending.view(self.mesh.settings.supervisor.expose_content)
            answer = await asyncio.to_thread(tty_prompt.ask, view, self._approval_setting("timeout_seconds"))
        if answer is None and channel == "tty":
            answer = "deny"  # fail closed: nobody can be asked
            reason = "approval.channel is tty and no terminal answered"
        else:
            reason = "answered at the terminal"
        if answer is None:
            return ""
        resolved = approvals.resolve(pending.id, answer, resolved_by="tty", reasoning=reason)
        return str(resolved.status)

    # -- traces ---------------------------------------------------------------------------------------------

    def _entry(self, call: Call, out: Outcome, start: float, **extra: Any) -> Any:
        from .tracing import TraceEntry

        latency = (time.perf_counter() - start) * 1000
        out.latency_ms = latency
        fields: dict[str, Any] = {
            "trace_id": call.trace.trace_id,
            "session_id": call.session_id,
            "agent_id": call.caller.agent_id,
            "user_id": call.caller.user_id,
            "tool": call.tool,
            "params": call.arguments,
            "policy": out.policy,
            "policy_rule": out.rule,
            "status_code": out.status,
            "latency_ms": int(latency),
            "error": out.error,
            "timestamp": _now_rfc3339(),
            "span_id": call.trace.span_id,
            "parent_span_id": call.trace.parent_span_id,
            "approval_id": out.approval_id,
            "estimated_input_tokens": _estimate_tokens(call.arguments),
            "estimated_output_tokens": _estimate_tokens(out.result) if out.has_result else 0,
            "tokens_source": "estimate",
        }
        fields.update({k: v for k, v in extra.items() if v not in (None, "")})
        return TraceEntry(**fields)

    def _trace(
        self,
        call: Call,
        out: Outcome,
        start: float,
        *,
        grant: Any = None,
        upstream: UpstreamResult | None = None,
        approval: Any = None,
        upstream_s: float | None = None,
        tool: ToolDef | None = None,
        final: bool = True,
    ) -> None:
        """Record the call's trace and, in the same commit, its metrics. `final` is False for a trace the call
        revises later (a blocking approval): its RED and duration series wait for that revision."""
        tracer = getattr(self.mesh, "tracer", None)
        extra: dict[str, Any] = {}
        if grant is not None:
            # CONTRACT 1.7: a call lifted by a grant links to the trace the grant was made from
            extra["grant_id"] = grant.id
            extra["parent_trace_id"] = getattr(grant, "trace_id", "")
        if upstream is not None and upstream.exit_code is not None:
            extra["exit_code"] = upstream.exit_code
        if upstream is not None and upstream.status_code and out.policy in ("allow", "human_approval"):
            extra["status_code"] = upstream.status_code
        if approval is not None:
            extra.update(
                approval_id=approval.id,
                approval_status=approval.status,
                approved_by=approval.resolved_by,
            )
        metrics = getattr(self.mesh, "metrics", None)

        def count(conn: Any = None) -> None:
            if metrics is not None:
                metrics.inc("calls_total", {"action": out.policy}, conn=conn)
                if final:
                    metrics.record_call(self._sample(call, out, start, tool, upstream, upstream_s), conn=conn)

        if tracer is None:
            count()
            out.latency_ms = (time.perf_counter() - start) * 1000
            return
        try:
            # one commit for the trace and the call's metrics
            tracer.record(self._entry(call, out, start, **extra), count)
        except Exception:  # a trace failure is logged, the decision stands
            log.exception("trace write failed for %s", call.trace.trace_id)

    def _sample(
        self,
        call: Call,
        out: Outcome,
        start: float,
        tool: ToolDef | None,
        upstream: UpstreamResult | None,
        upstream_s: float | None,
    ) -> CallSample:
        """The metrics of one finished call (shared/metrics.py): outcome, duration, and its upstream's health."""
        failed = upstream is not None and bool(upstream.error) and upstream.status_code != 400  # 400: refused here
        if out.policy in ("deny", "rate_limited", "halted"):
            outcome = out.policy
        elif out.policy == "error" or failed:
            outcome = "error"
        elif out.policy == "human_approval":
            outcome = "approval"
        else:
            outcome = "allow"
        name, source = ("", "")
        if upstream is not None and tool is not None:
            name, source = self.mesh.registry.upstream_of(tool)
        return CallSample(
            tool=call.tool,
            agent=call.caller.agent_id,
            outcome=outcome,
            transport=call.transport,
            seconds=time.perf_counter() - start,
            upstream=name,
            source=source,
            upstream_seconds=upstream_s,
            upstream_failed=failed,
            upstream_down=upstream is not None and upstream.status_code >= 500,
        )

    def _trace_update_after_approval(
        self,
        call: Call,
        out: Outcome,
        approval: Any,
        upstream: UpstreamResult | None,
        start: float,
        *,
        tool: ToolDef | None = None,
        upstream_s: float | None = None,
    ) -> None:
        """Revise the call's trace with its resolution; the call's metrics go in the same commit."""
        out.latency_ms = (time.perf_counter() - start) * 1000
        tracer = getattr(self.mesh, "tracer", None)
        metrics = getattr(self.mesh, "metrics", None)

        def count(conn: Any = None) -> None:
            if metrics is not None:
                metrics.record_call(self._sample(call, out, start, tool, upstream, upstream_s), conn=conn)

        if tracer is None:
            count()
            return
        changes: dict[str, Any] = {
            "status_code": out.status,
            "latency_ms": int(out.latency_ms),
            "approval_status": approval.status if approval.status != "pending" else "",
            "approved_by": approval.resolved_by or "",
            "error": out.error,
        }
        if getattr(approval, "resolved_at", None) and getattr(approval, "created_at", None):
            try:
                created = datetime.fromisoformat(str(approval.created_at).replace("Z", "+00:00"))
                resolved = datetime.fromisoformat(str(approval.resolved_at).replace("Z", "+00:00"))
                changes["approval_ms"] = int((resolved - created).total_seconds() * 1000)
            except ValueError:
                pass
        if getattr(approval, "reasoning", ""):
            changes["supervisor_reasoning"] = approval.reasoning
        if getattr(approval, "confidence", None) is not None:
            changes["supervisor_confidence"] = approval.confidence
        if upstream is not None:
            changes["status_code"] = upstream.status_code or out.status
            changes["estimated_output_tokens"] = _estimate_tokens(upstream.result)
            if upstream.exit_code is not None:
                changes["exit_code"] = upstream.exit_code
        try:
            tracer.update(call.trace.trace_id, count, **changes)
        except Exception:
            log.exception("trace update failed for %s", call.trace.trace_id)
