"""What a governed call leaves behind: its trace rows and its metrics, written so the audit trail fails closed.

A call that reaches its upstream has a durable trace row first (an intent, status_code 0, written with the call's
rate-limit count in one commit; its metrics are held by the worker, shared/metrics.py), and its outcome is appended
after as the next revision. A call ending before the upstream (halt, deny, rate limit, approval refused, /decide) is
answered only once its trace is committed. These writes go through the trace store's group commit
(shared/store/group_commit.py): the calls of one event-loop turn share one transaction, and each call still waits
for its own commit. Whatever trace write a call cannot go on without fails, the call is refused with `Unavailable`
(503) and nothing is run."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from flux7.shared.errors import Unavailable
from flux7.shared.gate.call import Call, Outcome
from flux7.shared.gate.policy import Decision
from flux7.shared.metrics import CallSample
from flux7.shared.store.db import Connection
from flux7.shared.tracing import Ingress, TraceEntry, format_timestamp
from flux7.shared.tracing.egress import egress
from flux7.shared.upstreams.base import ToolDef, UpstreamResult

if TYPE_CHECKING:
    from flux7.shared.gate.approvals import Approval
    from flux7.shared.gate.grants import Grant
    from flux7.shared.gate.limits import RateLimiter
    from flux7.shared.gate.policy import Policy
    from flux7.shared.metrics import Metrics
    from flux7.shared.tracing import Tracer
    from flux7.shared.upstreams.registry import Registry

__all__ = ["CallRecorder", "LimitedAtRelease", "SettledRecord"]

log = logging.getLogger("flux7.pipeline")

T = TypeVar("T")


class LimitedAtRelease(Exception):
    """An approved call over a limit at its claim: rolls the claim back (the approval stays approved)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _now_rfc3339() -> str:
    # Microseconds, as the trace has always carried; format_timestamp caches the part that changes once a second.
    return format_timestamp(time.time_ns() // 1000 * 1000)


def estimate_tokens(value: Any) -> int:
    if value is None:
        return 0
    try:
        return len(msgspec.json.encode(value)) // 4
    except TypeError:
        return len(str(value)) // 4


class CallRecorder:
    """The trace and metric writes of one call's steps, over the mesh's tracer, metrics and registry."""

    def __init__(self, tracer: Tracer, metrics: Metrics, registry: Registry) -> None:
        self.tracer = tracer
        self.metrics = metrics
        self.registry = registry

    # -- writes the call cannot go on without ------------------------------------------------------------

    @staticmethod
    def write(call: Call, fn: Callable[[], T]) -> T:
        """A write the call cannot go on without (its trace, its approval): any failure refuses the call."""
        try:
            return fn()
        except LimitedAtRelease:
            raise  # a refusal decided inside the write, not a failure of it
        except Unavailable:
            log.warning("call %s refused: the store is locked", call.trace.trace_id)
            raise
        except Exception as e:
            log.exception("call %s refused: its trace could not be written", call.trace.trace_id)
            raise Unavailable(f"audit trail unavailable: the call was refused and not run ({e})") from e

    @staticmethod
    async def write_grouped(call: Call, write: Awaitable[T]) -> T:
        """`write` for a write committed with other calls' (shared/store/group_commit.py): a batch that fails
        refuses every call in it, each as its own write failing would."""
        try:
            return await write
        except Unavailable:
            log.warning("call %s refused: the store is locked", call.trace.trace_id)
            raise
        except Exception as e:
            log.exception("call %s refused: its trace could not be written", call.trace.trace_id)
            raise Unavailable(f"audit trail unavailable: the call was refused and not run ({e})") from e

    # -- metrics ------------------------------------------------------------------------------------------

    def count(self, action: str, conn: Connection | None = None) -> None:
        self.metrics.count_action(action, conn=conn)

    def finished(
        self,
        call: Call,
        out: Outcome,
        start: float,
        conn: Connection | None = None,
        *,
        tool: ToolDef | None = None,
        upstream: UpstreamResult | None = None,
        upstream_s: float | None = None,
    ) -> None:
        """A call's RED, duration and upstream series, once it has ended (held by a serving worker; written in the
        last trace write's commit otherwise)."""
        self.metrics.record_call(self._sample(call, out, start, tool, upstream, upstream_s), conn=conn)

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
            name, source = self.registry.upstream_of(tool)
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

    # -- trace entries ------------------------------------------------------------------------------------

    def otel_fields(
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
            fields["upstream"] = egress(self.registry, tool, upstream, upstream_at, upstream_s or 0.0)
        return fields

    @staticmethod
    def entry(call: Call, out: Outcome, start: float, **extra: Any) -> TraceEntry:
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
            estimated_input_tokens=estimate_tokens(call.arguments),
            estimated_output_tokens=estimate_tokens(out.result) if out.has_result else 0,
            tokens_source="estimate",
            **given,
        )

    @staticmethod
    def grant_fields(grant: Grant | None) -> dict[str, Any]:
        if grant is None:
            return {}
        # CONTRACT 1.7: a call lifted by a grant links to the trace the grant was made from
        return {"grant_id": grant.id, "parent_trace_id": grant.trace_id}

    @staticmethod
    def approval_changes(approval: Approval, out: Outcome | None) -> dict[str, Any]:
        """The approval's part of a trace revision (who settled it, how, how long it took)."""
        changes: dict[str, Any] = {
            "approval_status": approval.status if approval.status != "pending" else "",
            "approved_by": approval.resolved_by or "",
        }
        if out is not None:
            changes.update(status_code=out.status, latency_ms=int(out.latency_ms), error=out.error)
        if approval.resolved_at and approval.created_at:
            try:
                created = datetime.fromisoformat(approval.created_at.replace("Z", "+00:00"))
                resolved = datetime.fromisoformat(approval.resolved_at.replace("Z", "+00:00"))
                changes["approval_ms"] = int((resolved - created).total_seconds() * 1000)
            except ValueError:
                pass
        if approval.reasoning:
            changes["supervisor_reasoning"] = approval.reasoning
        if approval.confidence is not None:
            changes["supervisor_confidence"] = approval.confidence
        return changes

    # -- the rows of a call -------------------------------------------------------------------------------

    async def final(self, call: Call, out: Outcome, start: float, *, grant: Grant | None = None) -> None:
        """The one trace of a call that ends before any upstream; committed before the call is answered."""

        def in_commit(conn: Connection | None = None) -> None:
            self.count(out.policy, conn)
            self.finished(call, out, start, conn)

        entry = self.entry(call, out, start, **self.grant_fields(grant), **self.otel_fields(call, out, start=start))
        await self.write_grouped(call, self.tracer.record_grouped(entry, in_commit))

    def record_in(self, conn: Connection, call: Call, out: Outcome, start: float, *, final: bool = False) -> int:
        """A call's first trace inside another write (its approval): the row id. `final`: the call ends here,
        so its spans leave now; otherwise they leave with its last revision."""
        entry = self.entry(call, out, start, **self.otel_fields(call, out, start=start))
        row_id: int = self.tracer.record_in(conn, entry, export=final)
        self.count(out.policy, conn)
        return row_id

    def intent_entry(
        self, call: Call, decision: Decision, start: float, approval: Approval | None, grant: Grant | None = None
    ) -> TraceEntry:
        # status_code 0 marks an intent: the upstream may be called, its outcome is not written yet.
        policy = "human_approval" if approval is not None else "allow"
        pending = Outcome(status=0, policy=policy, trace_id=call.trace.trace_id, rule=decision.rule)
        extra = {**self.grant_fields(grant), **self.otel_fields(call, pending, start=start)}
        if approval is not None:
            extra.update(approval_id=approval.id, approval_status=approval.status, approved_by=approval.resolved_by)
        return self.entry(call, pending, start, **extra)

    async def begin(
        self,
        call: Call,
        decision: Decision,
        start: float,
        grant: Grant | None,
        limits: RateLimiter | None,
        policy: Policy | None,
    ) -> tuple[int, Any]:
        """The intent of an allowed call, durable before the upstream is called: (row id, the entry as stored).
        `limits`: count the call in the same commit (None when its check already counted it)."""
        agent = call.caller.agent_id

        def in_commit(conn: Connection | None = None) -> None:
            if limits is not None:
                limits.record(agent, policy, call.tool, call.arguments, conn=conn)
            self.count("allow", conn)

        entry = self.intent_entry(call, decision, start, None, grant)
        written: tuple[int, Any] = await self.write_grouped(call, self.tracer.begin_grouped(entry, in_commit))
        return written

    def intent_in(self, conn: Connection, call: Call, decision: Decision, start: float, approval: Approval) -> int:
        """The intent of a claimed call (MCP), inside the transaction that uses up its approval (and counts it
        against its limits)."""
        row_id, _ = self.tracer.store.insert(conn, self.intent_entry(call, decision, start, approval))
        self.count("human_approval", conn)
        return int(row_id)

    def approved_intent(self, call: Call, approval: Approval, row_id: int, start: float) -> int:
        """The pending row of an approved call becomes its intent (status_code 0) before the upstream (its limits
        were counted as it was released)."""
        if not row_id:
            return 0
        latency = (time.perf_counter() - start) * 1000
        changes = self.approval_changes(approval, None)
        changes.update(status_code=0, latency_ms=int(latency))
        self.write(call, lambda: self.tracer.revise(row_id, changes))
        return row_id

    def settle(
        self,
        call: Call,
        out: Outcome,
        resolved: Approval,
        row_id: int,
        start: float,
        tool: ToolDef | None,
        **extra: Any,
    ) -> Outcome:
        """A queued call's row revised to `out`, its last revision, with its approval and metrics."""

        def in_commit(conn: Connection | None = None) -> None:
            self.finished(call, out, start, conn, tool=tool)

        if not row_id:
            in_commit()
            return out
        changes = {**self.approval_changes(resolved, out), **self.otel_fields(call, out, start=start), **extra}
        self.write(call, lambda: self.tracer.revise(row_id, changes, in_commit, export=True))
        return out

    async def outcome(
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
            self.finished(call, out, start, tool=tool, upstream=upstream, upstream_s=upstream_s)
            return
        changes: dict[str, Any] = {
            "status_code": upstream.status_code or out.status,
            "latency_ms": int(out.latency_ms),
            "error": out.error,
            "estimated_output_tokens": estimate_tokens(out.result) if out.has_result else 0,
            **self.otel_fields(call, out, tool, upstream, upstream_at, upstream_s, start),
        }
        if upstream.exit_code is not None:
            changes["exit_code"] = upstream.exit_code

        def in_commit(conn: Connection) -> None:
            self.finished(call, out, start, conn, tool=tool, upstream=upstream, upstream_s=upstream_s)

        try:
            await self.tracer.revise_grouped(row_id, changes, in_commit, export=True, current=intent)
        except Exception:
            log.exception("outcome of %s not recorded: its trace stays outcome unknown", call.trace.trace_id)


class SettledRecord:
    """Approval listener: when a call answered "pending" (MCP's claim flow: nobody waits on it) is decided, its
    trace row is revised with the decision and who made it, so no decided call reads "pending" for ever. A call
    some caller waits on revises its own row (shared/gate/approval_flow.py)."""

    def __init__(self, tracer: Tracer, claimable: Callable[[str], bool]) -> None:
        self._tracer = tracer
        self._claimable = claimable

    def __call__(self, approval: Approval) -> None:
        if approval.status == "pending" or not approval.trace_id or not self._claimable(approval.id):
            return
        try:
            for row_id in self._tracer.store.rows_awaiting(approval.trace_id, approval.id):
                self._tracer.revise(row_id, CallRecorder.approval_changes(approval, None), export=True)
        except Exception:
            log.exception("the pending trace of approval %s was not revised with its decision", approval.id)
