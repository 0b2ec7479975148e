"""Control-plane events (resolutions, timeouts, grants, stops) written to the trace as `mesh.*` entries.

Kept behind one function so the components work, and stay testable, in a mesh without a tracer."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from flux7.shared.tracecontext import new_span_id, new_trace_id

__all__ = ["record_event", "rfc3339"]

log = logging.getLogger("flux7.audit")


def rfc3339(ts: float | None) -> str:
    """Epoch seconds as RFC3339 UTC with microseconds ("" for None): the views' and traces' time format."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def record_event(
    owner: Any,
    *,
    tool: str,
    agent_id: str,
    params: Any,
    policy_rule: str,
    policy: str = "allow",
    status_code: int = 200,
    **fields: Any,
) -> str:
    """Record one event when `owner` (the Mesh) has a tracer; returns its trace id ("" when not recorded).
    A tracing fault is logged and never fails the control-plane action it describes."""
    tracer = getattr(owner, "tracer", None) if owner is not None else None
    if tracer is None:
        return ""
    try:
        from flux7.shared.tracing import TraceEntry  # built by the tracing component; absent in a bare core
    except ImportError:
        return ""
    values: dict[str, Any] = {
        "trace_id": new_trace_id(),
        "span_id": new_span_id(),
        "agent_id": agent_id,
        "tool": tool,
        "params": params,
        "policy": policy,
        "policy_rule": policy_rule,
        "status_code": status_code,
        "latency_ms": 0.0,
        "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        **{k: v for k, v in fields.items() if v not in (None, "")},
    }
    known = getattr(TraceEntry, "__struct_fields__", None)
    if known is not None:
        values = {k: v for k, v in values.items() if k in known}
    try:
        tracer.record(TraceEntry(**values))
    except Exception:
        log.exception("could not trace %s", tool)
        return ""
    return str(values["trace_id"])
