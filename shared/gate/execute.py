"""Step three of a governed call: execute. The intent is durable before the upstream is called (fail closed), the
upstream answers (or fails, or times out), and the outcome is appended to the intent."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from flux7.shared.gate.approval_flow import Release
from flux7.shared.gate.call import Call, Outcome
from flux7.shared.gate.decide import Verdict
from flux7.shared.gate.record import CallRecorder
from flux7.shared.upstreams.base import CallContext, ToolDef, UpstreamResult

if TYPE_CHECKING:
    from flux7.shared.gate.deps import GateDeps

__all__ = ["Executor"]

log = logging.getLogger("flux7.pipeline")


class Executor:
    def __init__(self, deps: GateDeps, recorder: CallRecorder) -> None:
        self._deps = deps
        self._rec = recorder

    async def execute(
        self, call: Call, verdict: Verdict, tool: ToolDef, start: float, release: Release | None
    ) -> Outcome:
        deps, rec, decision = self._deps, self._rec, verdict.decision
        if release is not None:  # an approved call: its intent was written as it was released
            row_id, intent = release.row_id, None
        else:  # the intent, with the call's rate-limit count in one commit (unless its check counted it)
            limits = None if verdict.counted else deps.limits
            row_id, intent = await rec.begin(call, decision, start, verdict.grant, limits, verdict.policy)
        deps.limits.collect()

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
        approval = release.approval if release is not None else None
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
        await rec.outcome(row_id, call, out, start, upstream, upstream_s, tool, upstream_at, intent)
        return out

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
            upstream: UpstreamResult = await self._deps.registry.call(
                tool, call.arguments if call.arguments is not None else {}, ctx
            )
        except Exception as e:  # an upstream fault is the call's result, never the server's
            log.warning("upstream call %s failed: %s", call.tool, e)
            upstream = UpstreamResult(status_code=502, error=str(e) or e.__class__.__name__)
        return upstream, time.perf_counter() - started
