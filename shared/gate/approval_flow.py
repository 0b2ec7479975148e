"""Step two of a governed call that needs a human: how its approval is waited for, by approval mode.

- `block` (REST, MCP with supervisor.enabled): queue it and wait for the resolution; an approved call is released
  to run (checked and counted against its limits as it is released).
- `claim` (MCP without a supervisor): never wait long. An approval given earlier for this very call is claimed
  (used up in the transaction that writes the call's intent); otherwise the call is queued, the person at the
  terminal is asked when the stdio transport brought a tty channel, and the agent is told to retry.
- `decide` (/decide): the decision only, nothing queued.
- `decide_wait` (/decide with `wait`): queued and waited for as `block`, but never forwarded: the caller runs it.

A strategy answers an `Outcome` (the call ends) or a `Release` (the call goes on to run, shared/gate/execute.py)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from flux7.shared.gate.call import ApprovalMode, Call, Outcome
from flux7.shared.gate.decide import Verdict
from flux7.shared.gate.record import CallRecorder, LimitedAtRelease
from flux7.shared.gate.tty_prompt import TerminalChannel
from flux7.shared.store.db import Connection
from flux7.shared.tracecontext import TraceContext, new_span_id

if TYPE_CHECKING:
    from flux7.shared.gate.approvals import Approval
    from flux7.shared.gate.deps import GateDeps

__all__ = ["ApprovalStrategy", "Release", "answer_decision", "denial", "strategy_for"]


@dataclass(frozen=True, slots=True)
class Release:
    """An approved call let through: its approval and its trace row (the intent the upstream's outcome revises)."""

    approval: Approval
    row_id: int


class ApprovalStrategy(Protocol):
    async def settle(self, call: Call, verdict: Verdict, start: float) -> Outcome | Release: ...


class _Queue:
    """What every queueing strategy shares: submit with a pending trace, wait, answer a refusal."""

    def __init__(self, deps: GateDeps, recorder: CallRecorder) -> None:
        self._deps = deps
        self._rec = recorder

    def setting(self, name: str) -> float:
        return float(getattr(self._deps.approvals.effective_settings(), name))

    def submit(self, call: Call, verdict: Verdict, start: float, *, final: bool = False) -> tuple[Approval, int]:
        """Queue the call for approval with its pending trace (202) in one commit: (approval, trace row id).
        `final`: the 202 is the call's answer (MCP's claim flow), so its metrics go in that commit too."""
        deps, rec, decision = self._deps, self._rec, verdict.decision
        rows: list[int] = []

        def trace_pending(conn: Connection, approval: Approval) -> None:
            pending = Outcome(
                status=202,
                policy="human_approval",
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
                approval_id=approval.id,
            )
            rows.append(rec.record_in(conn, call, pending, start, final=final))
            if final:
                rec.finished(call, pending, start, conn)

        approval = rec.write(
            call,
            lambda: deps.approvals.submit(
                agent=call.caller.agent_id,
                tool=call.tool,
                arguments=call.arguments,
                trace_id=call.trace.trace_id,
                policy_rule=decision.rule,
                policy_version=deps.policies.current.version,
                session_id=call.session_id,
                callback_url=call.callback_url,
                required_approvals=decision.approvals,
                preview=call.preview,
                requester_user=call.caller.user_id,
                also=trace_pending,
            ),
        )
        return approval, rows[0] if rows else 0

    async def wait_for_human(self, call: Call, verdict: Verdict, start: float) -> tuple[Approval, Outcome | None, int]:
        """Queue the call and wait for its resolution: (approval, the refusal when it was not approved, its row)."""
        rec, decision = self._rec, verdict.decision
        approval, row_id = self.submit(call, verdict, start)
        resolved = await self._deps.approvals.wait(approval.id, self.setting("timeout_seconds"))
        if resolved.status == "approved":
            return resolved, None, row_id
        denied = resolved.status == "denied"
        out = Outcome(
            status=403 if denied else 408,
            policy="human_approval",
            trace_id=call.trace.trace_id,
            rule=decision.rule,
            reason=decision.reason,
            error=denial(resolved) if denied else "approval timed out",
            approval_id=resolved.id,
            approval_status="denied" if denied else "timeout",
            resolved_by=resolved.resolved_by,
            reasoning=resolved.reasoning,
        )
        out.latency_ms = (time.perf_counter() - start) * 1000
        return resolved, rec.settle(call, out, resolved, row_id, start, verdict.tool), row_id

    def admit(self, call: Call, verdict: Verdict) -> str | None:
        """Checked again and counted as it is released: approvals released at once (on several instances) never
        let more calls through than the limit; the rest are refused as any call is."""
        return self._deps.limits.admit(call.caller.agent_id, verdict.policy, call.tool, call.arguments)

    def limited(
        self, call: Call, verdict: Verdict, resolved: Approval, row_id: int, start: float, limited: str
    ) -> Outcome:
        """An approved call over a limit when released: refused with the answer any call over it gets (429,
        rate_limited), its row revised to that refusal with its approval; the upstream is not called."""
        out = Outcome(
            status=429,
            policy="rate_limited",
            trace_id=call.trace.trace_id,
            rule=verdict.decision.rule,
            reason=limited,
            error=limited,
            approval_id=resolved.id,
            approval_status="approved",
            resolved_by=resolved.resolved_by,
        )
        out.latency_ms = (time.perf_counter() - start) * 1000
        return self._rec.settle(call, out, resolved, row_id, start, verdict.tool, policy="rate_limited")


class Block(_Queue):
    async def settle(self, call: Call, verdict: Verdict, start: float) -> Outcome | Release:
        approval, refused, row_id = await self.wait_for_human(call, verdict, start)
        if refused is not None:
            return refused
        limited = self.admit(call, verdict)
        if limited:
            return self.limited(call, verdict, approval, row_id, start, limited)
        # the pending row becomes the approved call's intent, before its upstream
        return Release(approval, self._rec.approved_intent(call, approval, row_id, start))


class DecideAndWait(_Queue):
    async def settle(self, call: Call, verdict: Verdict, start: float) -> Outcome | Release:
        """Answered once a human (or sup7) resolved it; approved, the row is revised to the decision (200) with
        its approval (counted against its limits as it was released); the caller reports the outcome later."""
        approval, refused, row_id = await self.wait_for_human(call, verdict, start)
        if refused is not None:
            return refused
        limited = self.admit(call, verdict)
        if limited:
            return self.limited(call, verdict, approval, row_id, start, limited)
        out = Outcome(
            status=200,
            policy="human_approval",
            trace_id=call.trace.trace_id,
            rule=verdict.decision.rule,
            reason=verdict.decision.reason,
            approval_id=approval.id,
            approval_status="approved",
            resolved_by=approval.resolved_by,
        )
        out.latency_ms = (time.perf_counter() - start) * 1000
        return self._rec.settle(call, out, approval, row_id, start, verdict.tool)


class DecideOnly:
    """/decide without `wait`: the decision is the answer; nothing is queued."""

    def __init__(self, recorder: CallRecorder) -> None:
        self._rec = recorder

    async def settle(self, call: Call, verdict: Verdict, start: float) -> Outcome | Release:
        return await answer_decision(self._rec, call, verdict, start)


async def answer_decision(recorder: CallRecorder, call: Call, verdict: Verdict, start: float) -> Outcome:
    """/decide's answer: the decision (200), traced; the caller runs the tool and reports its outcome. An allowed
    call was counted against its limits by its check."""
    decision = verdict.decision
    out = Outcome(
        status=200, policy=decision.action, trace_id=call.trace.trace_id, rule=decision.rule, reason=decision.reason
    )
    await recorder.final(call, out, start, grant=verdict.grant)
    return out


class Claim(_Queue):
    def __init__(
        self,
        deps: GateDeps,
        recorder: CallRecorder,
        rerun: Callable[[Call], Awaitable[Outcome]],
        terminal: TerminalChannel | None,
    ) -> None:
        super().__init__(deps, recorder)
        self._rerun = rerun
        self._terminal = terminal

    async def settle(self, call: Call, verdict: Verdict, start: float) -> Outcome | Release:
        deps, rec, decision = self._deps, self._rec, verdict.decision
        agent = call.caller.agent_id
        claimed: list[int] = []

        def intent_of_claim(conn: Connection, approval: Approval) -> None:
            # The approval is used up only together with the intent of the call it lets through, and only when
            # the call fits its limits now (checked and counted in the claim's transaction). Over a limit,
            # nothing is written: the approval stays for a claim once there is room.
            limited = deps.limits.admit(agent, verdict.policy, call.tool, call.arguments, conn)
            if limited:
                raise LimitedAtRelease(limited)
            claimed.append(rec.intent_in(conn, call, decision, start, approval))

        try:
            approval = rec.write(
                call, lambda: deps.approvals.claim_approved(agent, call.tool, call.arguments, also=intent_of_claim)
            )
        except LimitedAtRelease as e:
            out = Outcome(
                status=429,
                policy="rate_limited",
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=e.text,
                error=e.text,
            )
            await rec.final(call, out, start)
            return out
        if approval is not None:
            return Release(approval, claimed[0] if claimed else 0)
        return await self._ask(call, verdict, start)

    async def _ask(self, call: Call, verdict: Verdict, start: float) -> Outcome:
        """No approval to claim: a refusal of this very call, a request already pending, or a new one (CONTRACT
        1.14), asked at the terminal when there is one, and waited for briefly (`approval.wait_seconds`)."""
        approvals, decision = self._deps.approvals, verdict.decision
        agent = call.caller.agent_id

        def answer(approval: Approval, status: int, approval_status: str) -> Outcome:
            return Outcome(
                status=status,
                policy="human_approval",
                trace_id=call.trace.trace_id,
                rule=decision.rule,
                reason=decision.reason,
                approval_id=approval.id,
                approval_status=approval_status,
                resolved_by=approval.resolved_by or "",
                reasoning=approval.reasoning if approval_status == "denied" else "",
            )

        denied = approvals.find_denied(agent, call.tool, call.arguments)
        if denied is not None:
            return answer(denied, 403, "denied")
        pending = approvals.find_pending(agent, call.tool, call.arguments)
        if pending is not None:
            return answer(pending, 202, "pending")
        pending, _ = self.submit(call, verdict, start, final=True)
        out = answer(pending, 202, "pending")
        out.latency_ms = (time.perf_counter() - start) * 1000
        asked = await self._ask_terminal(pending)
        if asked == "approved":
            return await self._rerun(_rerun_span(call))
        if asked == "denied":
            return answer(approvals.get(pending.id), 403, "denied")
        wait_s = self.setting("wait_seconds")
        if wait_s > 0:
            resolved = await approvals.wait_briefly(pending.id, wait_s)
            if resolved is not None and resolved.status == "approved":
                return await self._rerun(_rerun_span(call))
            if resolved is not None and resolved.status == "denied":
                return answer(resolved, 403, "denied")
        return out

    async def _ask_terminal(self, pending: Approval) -> str:
        """The tty channel (CONTRACT 1.14 step 1), when the transport brought one: "" leaves it to the queue."""
        if self._terminal is None:
            return ""
        view = msgspec.to_builtins(pending.view(self._deps.settings.supervisor.expose_content))
        answer, reason = await self._terminal.ask(view, self.setting("timeout_seconds"))
        if answer is None:
            return ""
        resolved = self._deps.approvals.resolve(pending.id, answer, resolved_by="tty", resolver="", reasoning=reason)
        return str(resolved.status)


def denial(approval: Approval) -> str:
    """What the agent is told of a denied approval: who denied it, and why when they said (CONTRACT 1.8's
    `approval denied by <resolver>`, then `: <reason>`)."""
    reason = " ".join(approval.reasoning.split())
    return (
        f"approval denied by {approval.resolved_by}: {reason}"
        if reason
        else f"approval denied by {approval.resolved_by}"
    )


def _rerun_span(call: Call) -> Call:
    """The approved call run again within the request that queued it: a span of its own under the queued call's
    (both rows are traced, and a span id names one span)."""
    trace = TraceContext(call.trace.trace_id, new_span_id(), parent_span_id=call.trace.span_id)
    return msgspec.structs.replace(call, trace=trace)


def strategy_for(
    mode: ApprovalMode,
    deps: GateDeps,
    recorder: CallRecorder,
    rerun: Callable[[Call], Awaitable[Outcome]],
    terminal: TerminalChannel | None = None,
) -> ApprovalStrategy:
    if mode == "claim":
        return Claim(deps, recorder, rerun, terminal)
    if mode == "decide_wait":
        return DecideAndWait(deps, recorder)
    if mode == "decide":
        return DecideOnly(recorder)
    return Block(deps, recorder)
