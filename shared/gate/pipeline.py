"""The one pipeline every transport enters (DESIGN "One pipeline for every transport").

halt -> lifecycle (catalog) -> lookup -> rate limit / loop -> policy + floors -> grant -> precedents -> approval queue
-> upstream -> trace.
REST, /decide and MCP (HTTP and stdio) build a `Call` and get an `Outcome`; only the approval step differs by mode.

The audit trail fails closed: a call that reaches its upstream has a durable trace row first (an intent, status_code
0, written with the call's rate-limit count in one commit; its metrics are held by the worker, shared/metrics.py),
and its outcome is appended after as the next revision. A call ending before the upstream (halt, deny, rate limit,
approval refused, /decide) is answered only once its trace is committed. These three writes (intent, outcome, final
trace) go through the trace store's group commit (shared/store/group_commit.py): the calls of one event-loop turn
share one transaction, and each call still waits for its own commit. Whatever trace write a call cannot go on
without fails, the call is refused with `Unavailable` (503) and nothing is run."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

import msgspec

from flux7.shared.auth.identity import Caller
from flux7.shared.errors import Unavailable
from flux7.shared.gate.policy import Decision, stricter
from flux7.shared.metrics import CallSample
from flux7.shared.tracecontext import TraceContext, new_span_id
from flux7.shared.tracing import Ingress, TraceEntry, format_timestamp
from flux7.shared.tracing.egress import egress
from flux7.shared.upstreams.base import CallContext, ToolDef, UpstreamResult

__all__ = ["ApprovalMode", "Call", "Outcome", "Pipeline"]

log = logging.getLogger("flux7.pipeline")

T = TypeVar("T")


class _LimitedAtRelease(Exception):
    """An approved call over a limit at its claim: rolls the claim back (the approval stays approved)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


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
    # Microseconds, as the trace has always carried; format_timestamp caches the part that changes once a second.
    return format_timestamp(time.time_ns() // 1000 * 1000)


def _estimate_tokens(value: Any) -> int:
    if value is None:
        return 0
    try:
        return len(msgspec.json.encode(value)) // 4
    except TypeError:
        return len(str(value)) // 4


class Pipeline:
    def __init__(self, mesh: Any) -> None:
        # shared/mesh.py's Mesh, which always sets halts, catalog, pins, limits, tracer and metrics: read as plain
        # attributes (a getattr with a default is a function call per read, several per call; issue 19).
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
        pins = self.mesh.pins
        if pins is not None and tool is not None:
            pin_floor = pins.floor_for(tool)
            if pin_floor is not None:
                floors.append(pin_floor)
        best: Decision | None = None
        for f in floors:
            best = f if best is None else stricter(best, f)
        return best

    def lifecycle_floor(self, agent: str) -> Decision | None:
        """The catalog's floor for this agent (deny when suspended or retired), None without a catalog."""
        catalog = self.mesh.catalog
        return catalog.floor(agent) if catalog is not None else None

    def evaluate(self, agent: str, tool_name: str, arguments: Any, tool: ToolDef | None) -> Decision:
        decision = self.mesh.policies.current.decide(agent, tool_name, arguments)
        return stricter(decision, self.floor_for(tool))

    # -- the pipeline ------------------------------------------------------------------------------------

    async def _stop_here(
        self, call: Call, start: float, status: int, policy: str, rule: str, reason: str, **kw: Any
    ) -> Outcome:
        """An outcome that ends the pipeline before the upstream: built, traced, returned."""
        out = Outcome(status=status, policy=policy, trace_id=call.trace.trace_id, rule=rule, reason=reason, **kw)
        await self._final(call, out, start)
        return out

    async def run(self, call: Call, mode: ApprovalMode = "block") -> Outcome:
        start = time.perf_counter()
        mesh = self.mesh
        agent = call.caller.agent_id

        # 1. emergency stop, before everything else
        halts = mesh.halts
        halt = halts.active_for(agent, call.session_id) if halts is not None else None
        if halt is not None:
            msg = halt.message
            return await self._stop_here(
                call, start, 403, "halted", f"halt:{halt.id}", msg, error=msg, halted=True, halt_message=msg
            )

        # 1b. the catalog's lifecycle (shared/governance/catalog.py): a suspended or retired agent is refused
        # before any policy, traced with rule lifecycle:<state>
        refusal = self.lifecycle_floor(agent)
        if refusal is not None:
            return await self._stop_here(call, start, 403, "deny", refusal.rule, refusal.reason, error=refusal.reason)

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
        limits = mesh.limits
        # an allowed call is checked and counted in one write transaction: exact across workers and instances
        counted_early = limits is not None and decision.action == "allow"
        if limits is not None and decision.action != "deny":
            limited = limits.check(agent, policy, call.tool, call.arguments, count=counted_early)
            if limited:
                return await self._stop_here(call, start, 429, "rate_limited", decision.rule, limited, error=limited)

        if decision.action == "deny":
            return await self._stop_here(
                call, start, 403, "deny", decision.rule, decision.reason, error=decision.reason
            )

        grant = None
        if decision.action == "human_approval":
            decision, grant = await self._lift(call, decision, tool)

        if mode == "decide_wait" and decision.action == "human_approval" and getattr(mesh, "approvals", None):
            # /decide with `wait`: queued like a REST call; answered once a human (or sup7) resolved it
            resolved, refused, row_id = await self._block_flow(call, decision, tool, start)
            if refused is not None:
                return refused
            limited = limits.admit(agent, policy, call.tool, call.arguments) if limits is not None else None
            if limited:
                return self._limited_after_approval(call, decision, resolved, row_id, start, tool, limited)
            return self._decided_after_approval(call, decision, resolved, row_id, start, tool)
        if mode in ("decide", "decide_wait"):
            out = Outcome(
                status=200,
                policy=decision.action,
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
            )
            await self._final(call, out, start, grant=grant)  # an allowed call was counted by its check
            return out
        assert tool is not None  # only /decide reaches here without a registered tool

        approval = None
        row_id = 0  # the trace row of this call, once written
        intent = None  # that row as this call wrote it, when it wrote it alone (the outcome revises it)
        if decision.action == "human_approval":
            # 7. the approval queue
            approvals = getattr(mesh, "approvals", None)
            if approvals is None:
                error = "approval queue not available: human_approval denies (fail closed)"
                return await self._stop_here(
                    call, start, 403, "human_approval", decision.rule, decision.reason, error=error
                )
            if mode == "claim":
                claimed: list[int] = []

                def intent_of_claim(conn: Any, claimed_approval: Any) -> None:
                    # The approval is used up only together with the intent of the call it lets through, and
                    # only when the call fits its limits now (checked and counted in the claim's transaction).
                    # Over a limit, nothing is written: the approval stays for a claim once there is room.
                    limited = None if limits is None else limits.admit(agent, policy, call.tool, call.arguments, conn)
                    if limited:
                        raise _LimitedAtRelease(limited)
                    claimed.append(self._intent_in(conn, call, decision, start, claimed_approval))

                try:
                    approval = self._write(
                        call,
                        lambda: approvals.claim_approved(
                            agent, call.tool, call.arguments, also=intent_of_claim if self._tracer else None
                        ),
                    )
                except _LimitedAtRelease as e:
                    return await self._stop_here(call, start, 429, "rate_limited", decision.rule, e.text, error=e.text)
                if approval is None:
                    return await self._claim_flow(call, decision, tool, start)
                row_id = claimed[0] if claimed else 0
                limited = None
                if not self._tracer and limits is not None:
                    limited = limits.admit(agent, policy, call.tool, call.arguments)
                if limited:
                    return await self._stop_here(
                        call, start, 429, "rate_limited", decision.rule, limited, error=limited
                    )
            else:
                approval, refused, row_id = await self._block_flow(call, decision, tool, start)
                if refused is not None:
                    return refused
                # Checked again and counted as it is released: approvals released at once (on several
                # instances) never let more calls through than the limit; the rest are refused as any call is.
                limited = limits.admit(agent, policy, call.tool, call.arguments) if limits is not None else None
                if limited:
                    return self._limited_after_approval(call, decision, approval, row_id, start, tool, limited)
                # 8a. the intent: the approved call, before its upstream
                row_id = self._approved_intent(call, approval, row_id, start)
        else:
            # 8a. the intent, with the call's rate-limit count in one commit
            row_id, intent = await self._begin(call, decision, start, grant, None if counted_early else limits, policy)
        if limits is not None:
            limits.collect()

        # 8. the upstream call
        upstream_at = time.perf_counter() - start  # otel: where the upstream call starts within the call
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
        # 9. the outcome, appended to the intent
        await self._outcome(row_id, call, out, start, upstream, upstream_s, tool, upstream_at, intent)
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
            verdict = await precedents.check(agent, tool, call.arguments, call.trace.trace_id, call.session_id)
            if verdict is not None:
                return Decision("allow", "supervisor:mem7", verdict), None
        return decision, None

    async def _forward(self, call: Call, tool: ToolDef) -> tuple[UpstreamResult, float]:
        """The upstream's result and how long it took (seconds)."""
        ctx = CallContext(
            trace_id=call.trace.trace_id,
            traceparent=call.trace.upstream_traceparent,  # the upstream's spans nest under the CLIENT span
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

    def _submit(self, call: Call, decision: Decision, start: float, *, final: bool = False) -> tuple[Any, int]:
        """Queue the call for approval with its pending trace (202) in one commit: (approval, trace row id).
        `final`: the 202 is the call's answer (MCP's claim flow), so its metrics go in that commit too."""
        rows: list[int] = []

        def trace_pending(conn: Any, approval: Any) -> None:
            pending = Outcome(
                status=202,
                policy="human_approval",
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
                approval_id=approval.id,
            )
            rows.append(self._record_in(conn, call, pending, start, final=final))
            if final:
                self._finished(call, pending, start, conn)

        approval = self._write(
            call,
            lambda: self.mesh.approvals.submit(
                agent=call.caller.agent_id,
                tool=call.tool,
                arguments=call.arguments,
                trace_id=call.trace.trace_id,
                policy_rule=decision.rule,
                policy_version=self.mesh.policies.current.version,
                session_id=call.session_id,
                callback_url=call.callback_url,
                also=trace_pending if self._tracer else None,
            ),
        )
        if not self._tracer:
            self._count("human_approval")
        return approval, rows[0] if rows else 0

    def _approval_setting(self, name: str) -> float:
        approvals = self.mesh.approvals
        runtime = approvals.effective_settings() if hasattr(approvals, "effective_settings") else None
        return float(getattr(runtime, name, getattr(self.mesh.settings.approval, name)))

    async def _block_flow(
        self, call: Call, decision: Decision, tool: ToolDef | None, start: float
    ) -> tuple[Any, Outcome | None, int]:
        """REST (and MCP with supervisor.enabled): queue the call and wait for its resolution.
        (approval, the refusal when it was not approved, the call's trace row)."""
        approval, row_id = self._submit(call, decision, start)
        resolved = await self.mesh.approvals.wait(approval.id, self._approval_setting("timeout_seconds"))
        if resolved.status == "approved":
            return resolved, None, row_id
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
        out.latency_ms = (time.perf_counter() - start) * 1000
        if row_id:
            changes = {**self._approval_changes(resolved, out), **self._otel_fields(call, out, start=start)}

            def in_commit(conn: Any) -> None:
                self._finished(call, out, start, conn, tool=tool)

            self._write(call, lambda: self.mesh.tracer.revise(row_id, changes, in_commit, export=True))
        else:
            self._finished(call, out, start, tool=tool)
        return resolved, out, row_id

    def _decided_after_approval(
        self,
        call: Call,
        decision: Decision,
        resolved: Any,
        row_id: int,
        start: float,
        tool: ToolDef | None,
    ) -> Outcome:
        """`/decide` with `wait`, approved: the call's row is revised to the decision (200) with its approval (it
        was counted against its limits when released); the caller reports the outcome later."""
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
        out.latency_ms = (time.perf_counter() - start) * 1000
        return self._settle(call, out, resolved, row_id, start, tool)

    def _limited_after_approval(
        self, call: Call, decision: Decision, resolved: Any, row_id: int, start: float, tool: Any, limited: str
    ) -> Outcome:
        """An approved call over a limit when released: refused with the answer any call over it gets (429,
        rate_limited), its row revised to that refusal with its approval; the upstream is not called."""
        out = Outcome(
            status=429,
            policy="rate_limited",
            trace_id=call.trace.trace_id,
            rule=decision.rule,
            reason=limited,
            error=limited,
            approval_id=resolved.id,
            approval_status="approved",
            resolved_by=resolved.resolved_by,
        )
        out.latency_ms = (time.perf_counter() - start) * 1000
        return self._settle(call, out, resolved, row_id, start, tool, policy="rate_limited")

    def _settle(
        self, call: Call, out: Outcome, resolved: Any, row_id: int, start: float, tool: Any, **extra: Any
    ) -> Outcome:
        """The queued call's row revised to `out`, its last revision, with its approval and metrics."""

        def in_commit(conn: Any = None) -> None:
            self._finished(call, out, start, conn, tool=tool)

        if not row_id:
            in_commit()
            return out
        changes = {**self._approval_changes(resolved, out), **self._otel_fields(call, out, start=start), **extra}
        self._write(call, lambda: self.mesh.tracer.revise(row_id, changes, in_commit, export=True))
        return out

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
        pending, _ = self._submit(call, decision, start, final=True)
        out = answer(pending, 202, "pending")
        out.latency_ms = (time.perf_counter() - start) * 1000
        asked = await self._ask_terminal(call, pending)
        if asked == "approved":
            return await self.run(self._rerun(call), mode="claim")
        if asked == "denied":
            return answer(approvals.get(pending.id), 403, "denied")
        wait_s = self._approval_setting("wait_seconds")
        if wait_s > 0:
            resolved = await approvals.wait_briefly(pending.id, wait_s)
            if resolved is not None and resolved.status == "approved":
                return await self.run(self._rerun(call), mode="claim")
            if resolved is not None and resolved.status == "denied":
                return answer(resolved, 403, "denied")
        return out

    @staticmethod
    def _rerun(call: Call) -> Call:
        """The approved call run again within the request that queued it: a span of its own under the queued
        call's (both rows are traced, and a span id names one span)."""
        trace = TraceContext(call.trace.trace_id, new_span_id(), parent_span_id=call.trace.span_id)
        return msgspec.structs.replace(call, trace=trace)

    async def _ask_terminal(self, call: Call, pending: Any) -> str:
        """The `tty` channels (CONTRACT 1.14 step 1), for the stdio transport only: ask the person at the
        terminal. `tty` without a terminal denies; `tty-fallback` leaves the approval to the queue."""
        channel = self.mesh.settings.approval.channel
        if call.transport != "stdio" or channel == "queue":
            return ""
        approvals = self.mesh.approvals
        from flux7.shared.gate import tty_prompt

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
        resolved = approvals.resolve(pending.id, answer, resolved_by="tty", resolver="", reasoning=reason)
        return str(resolved.status)

    # -- traces ---------------------------------------------------------------------------------------------

    @property
    def _tracer(self) -> Any:
        return self.mesh.tracer

    def _write(self, call: Call, fn: Callable[[], Any]) -> Any:
        """A write the call cannot go on without (its trace, its approval): any failure refuses the call."""
        try:
            return fn()
        except _LimitedAtRelease:
            raise  # a refusal decided inside the write, not a failure of it
        except Unavailable:
            log.warning("call %s refused: the store is locked", call.trace.trace_id)
            raise
        except Exception as e:
            log.exception("call %s refused: its trace could not be written", call.trace.trace_id)
            raise Unavailable(f"audit trail unavailable: the call was refused and not run ({e})") from e

    async def _write_grouped(self, call: Call, write: Awaitable[T]) -> T:
        """`_write` for a write committed with other calls' (shared/store/group_commit.py): a batch that fails refuses
        every call in it, each as its own write failing would."""
        try:
            return await write
        except Unavailable:
            log.warning("call %s refused: the store is locked", call.trace.trace_id)
            raise
        except Exception as e:
            log.exception("call %s refused: its trace could not be written", call.trace.trace_id)
            raise Unavailable(f"audit trail unavailable: the call was refused and not run ({e})") from e

    def _count(self, action: str, conn: Any = None) -> None:
        metrics = self.mesh.metrics
        if metrics is not None:
            metrics.count_action(action, conn=conn)

    def _finished(
        self,
        call: Call,
        out: Outcome,
        start: float,
        conn: Any = None,
        *,
        tool: ToolDef | None = None,
        upstream: UpstreamResult | None = None,
        upstream_s: float | None = None,
    ) -> None:
        """A call's RED, duration and upstream series, once it has ended (held by a serving worker; written in the
        last trace write's commit otherwise)."""
        metrics = self.mesh.metrics
        if metrics is not None:
            metrics.record_call(self._sample(call, out, start, tool, upstream, upstream_s), conn=conn)

    def _otel_fields(
        self,
        call: Call,
        out: Outcome,
        tool: ToolDef | None = None,
        upstream: UpstreamResult | None = None,
        upstream_at: float = 0.0,
        upstream_s: float | None = None,
        start: float = 0.0,
    ) -> dict[str, Any]:
        """The entry's `request` and `upstream` (shared/tracing/entry.py): what the OpenTelemetry spans need."""
        http = call.transport in ("rest", "decide")
        received_ns = time.time_ns() - round((time.perf_counter() - start) * 1e9)
        fields: dict[str, Any] = {
            "request": Ingress(
                transport=call.transport,
                mcp_session_id=call.mcp_session_id,
                mcp_protocol_version=call.mcp_protocol_version,
                jsonrpc_id=call.jsonrpc_id,
                status=out.status if http else 0,
                received_at=format_timestamp(received_ns),
            )
        }
        if upstream is not None and tool is not None:
            fields["upstream"] = egress(self.mesh.registry, tool, upstream, upstream_at, upstream_s or 0.0)
        return fields

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

    def _entry(self, call: Call, out: Outcome, start: float, **extra: Any) -> Any:
        latency = (time.perf_counter() - start) * 1000
        out.latency_ms = latency
        caller, trace = call.caller, call.trace
        # The extras that are set (None and "" leave the field at its zero value); keywords straight into the
        # Struct, no intermediate dict of the fixed fields.
        given = {k: v for k, v in extra.items() if v is not None and not (isinstance(v, str) and v == "")}
        approval_id = given.pop("approval_id", out.approval_id)  # the one fixed field an extra may set
        return TraceEntry(
            trace_id=trace.trace_id,
            session_id=call.session_id,
            agent_id=caller.agent_id,
            user_id=caller.user_id,
            tool=call.tool,
            params=call.arguments,
            policy=out.policy,
            policy_rule=out.rule,
            status_code=out.status,
            latency_ms=int(latency),
            error=out.error,
            timestamp=_now_rfc3339(),
            span_id=trace.span_id,
            parent_span_id=trace.parent_span_id,
            approval_id=approval_id,
            estimated_input_tokens=_estimate_tokens(call.arguments),
            estimated_output_tokens=_estimate_tokens(out.result) if out.has_result else 0,
            tokens_source="estimate",
            **given,
        )

    @staticmethod
    def _grant_fields(grant: Any) -> dict[str, Any]:
        if grant is None:
            return {}
        # CONTRACT 1.7: a call lifted by a grant links to the trace the grant was made from
        return {"grant_id": grant.id, "parent_trace_id": getattr(grant, "trace_id", "")}

    async def _final(self, call: Call, out: Outcome, start: float, *, grant: Any = None) -> None:
        """The one trace of a call that ends before any upstream; committed before the call is answered."""
        tracer = self._tracer

        def in_commit(conn: Any = None) -> None:
            self._count(out.policy, conn)
            self._finished(call, out, start, conn)

        if tracer is None:
            in_commit()
            out.latency_ms = (time.perf_counter() - start) * 1000
            return
        entry = self._entry(call, out, start, **self._grant_fields(grant), **self._otel_fields(call, out, start=start))
        await self._write_grouped(call, tracer.record_grouped(entry, in_commit))

    def _record_in(self, conn: Any, call: Call, out: Outcome, start: float, *, final: bool = False) -> int:
        """A call's first trace inside another write (its approval): the row id. `final`: the call ends here,
        so its spans leave now; otherwise they leave with its last revision."""
        entry = self._entry(call, out, start, **self._otel_fields(call, out, start=start))
        row_id: int = self.mesh.tracer.record_in(conn, entry, export=final)
        self._count(out.policy, conn)
        return row_id

    def _intent_entry(self, call: Call, decision: Decision, start: float, approval: Any, grant: Any = None) -> Any:
        # status_code 0 marks an intent: the upstream may be called, its outcome is not written yet.
        policy = "human_approval" if approval is not None else "allow"
        pending = Outcome(status=0, policy=policy, trace_id=call.trace.trace_id, rule=decision.rule)
        extra = {**self._grant_fields(grant), **self._otel_fields(call, pending, start=start)}
        if approval is not None:
            extra.update(approval_id=approval.id, approval_status=approval.status, approved_by=approval.resolved_by)
        return self._entry(call, pending, start, **extra)

    async def _begin(
        self, call: Call, decision: Decision, start: float, grant: Any, limits: Any, policy: Any
    ) -> tuple[int, Any]:
        """The intent of an allowed call, durable before the upstream is called: (row id, the entry as stored);
        (0, None) without a tracer."""
        agent = call.caller.agent_id
        tracer = self._tracer

        def in_commit(conn: Any = None) -> None:
            if limits is not None:
                limits.record(agent, policy, call.tool, call.arguments, conn=conn)
            self._count("allow", conn)

        if tracer is None:
            in_commit()
            return 0, None
        entry = self._intent_entry(call, decision, start, None, grant)
        written: tuple[int, Any] = await self._write_grouped(call, tracer.begin_grouped(entry, in_commit))
        return written

    def _intent_in(self, conn: Any, call: Call, decision: Decision, start: float, approval: Any) -> int:
        """The intent of a claimed call (MCP), inside the transaction that uses up its approval (and counts it
        against its limits)."""
        row_id, _ = self.mesh.tracer.store.insert(conn, self._intent_entry(call, decision, start, approval))
        self._count("human_approval", conn)
        return int(row_id)

    def _approved_intent(self, call: Call, approval: Any, row_id: int, start: float) -> int:
        """The pending row of an approved call becomes its intent (status_code 0) before the upstream (its limits
        were counted as it was released)."""
        if not row_id:
            return 0
        latency = (time.perf_counter() - start) * 1000
        changes = self._approval_changes(approval, None)
        changes.update(status_code=0, latency_ms=int(latency))
        self._write(call, lambda: self.mesh.tracer.revise(row_id, changes))
        return row_id

    async def _outcome(
        self,
        row_id: int,
        call: Call,
        out: Outcome,
        start: float,
        upstream: UpstreamResult,
        upstream_s: float,
        tool: ToolDef,
        upstream_at: float = 0.0,
        intent: Any = None,
    ) -> None:
        """Append the outcome to the call's intent. The upstream has run, so a write that fails here no longer
        refuses the call: the row stays "outcome unknown" (status_code 0) and the failure is logged. `intent`:
        the row as this call stored it, when nothing else revised it since (the store then need not read it)."""
        out.latency_ms = (time.perf_counter() - start) * 1000
        if not row_id:
            self._finished(call, out, start, tool=tool, upstream=upstream, upstream_s=upstream_s)
            return
        changes: dict[str, Any] = {
            "status_code": upstream.status_code or out.status,
            "latency_ms": int(out.latency_ms),
            "error": out.error,
            "estimated_output_tokens": _estimate_tokens(out.result) if out.has_result else 0,
            **self._otel_fields(call, out, tool, upstream, upstream_at, upstream_s, start),
        }
        if upstream.exit_code is not None:
            changes["exit_code"] = upstream.exit_code

        def in_commit(conn: Any) -> None:
            self._finished(call, out, start, conn, tool=tool, upstream=upstream, upstream_s=upstream_s)

        try:
            await self.mesh.tracer.revise_grouped(row_id, changes, in_commit, export=True, current=intent)
        except Exception:
            log.exception("outcome of %s not recorded: its trace stays outcome unknown", call.trace.trace_id)

    @staticmethod
    def _approval_changes(approval: Any, out: Outcome | None) -> dict[str, Any]:
        """The approval's part of a trace revision (who settled it, how, how long it took)."""
        changes: dict[str, Any] = {
            "approval_status": approval.status if approval.status != "pending" else "",
            "approved_by": approval.resolved_by or "",
        }
        if out is not None:
            changes.update(status_code=out.status, latency_ms=int(out.latency_ms), error=out.error)
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
        return changes
