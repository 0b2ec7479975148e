"""Control-plane events (resolutions, timeouts, grants, stops) written to the trace as `mesh.*` entries."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from flux7.shared.tracecontext import new_span_id, new_trace_id
from flux7.shared.tracing.entry import TraceEntry

if TYPE_CHECKING:
    from flux7.shared.tracing import Tracer

__all__ = ["EventLog", "rfc3339"]

log = logging.getLogger("flux7.audit")


def rfc3339(ts: float | None) -> str:
    """Epoch seconds as RFC3339 UTC with microseconds ("" for None): the views' and traces' time format."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class EventLog:
    """Control-plane events (resolutions, timeouts, grants, stops, edits) as `mesh.*` trace entries. Without a
    tracer (a bare core in a test) nothing is written. A tracing fault is logged and never fails the action it
    describes."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self._tracer = tracer

    def record(
        self,
        *,
        tool: str,
        actor: str,
        params: Any,
        policy_rule: str,
        agent_id: str = "",
        policy: str = "allow",
        status_code: int = 200,
        **fields: Any,
    ) -> str:
        """Record one event; returns its trace id ("" when not recorded). `actor` (who did it: `user:alice`,
        `owner:admin-token`, `system:timeout`) is the entry's user, never its agent: operators are not agents;
        `agent_id` is the agent the event is about, when there is one (an approval's)."""
        if self._tracer is None:
            return ""
        values: dict[str, Any] = {
            "trace_id": new_trace_id(),
            "span_id": new_span_id(),
            "agent_id": agent_id,
            "user_id": actor,
            "tool": tool,
            "params": params,
            "policy": policy,
            "policy_rule": policy_rule,
            "status_code": status_code,
            "latency_ms": 0.0,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            **{k: v for k, v in fields.items() if v not in (None, "") and k in _ENTRY_FIELDS},
        }
        try:
            self._tracer.record(TraceEntry(**values))
        except Exception:
            log.exception("could not trace %s", tool)
            return ""
        return str(values["trace_id"])


_ENTRY_FIELDS = frozenset(TraceEntry.__struct_fields__)
