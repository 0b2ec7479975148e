"""W3C trace context: the caller's trace id from Traceparent or X-Trace-Id, else a new one."""

from __future__ import annotations

import hashlib
import os
import re

import msgspec

__all__ = ["TraceContext", "client_span_id", "new_span_id", "new_trace_id", "parse_traceparent"]

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
# Compiled once: re.fullmatch(pattern, ...) looks the pattern up in re's cache on every call (docs/benchmarks.md).
_W3C_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_W3C_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_X_TRACE_ID = re.compile(r"[0-9A-Za-z_.:-]{1,128}")


# os.urandom is what secrets.token_hex reads, without its three Python-level wrappers per id (docs/benchmarks.md).
def new_trace_id() -> str:
    return os.urandom(16).hex()


def new_span_id() -> str:
    return os.urandom(8).hex()


class TraceContext(msgspec.Struct, frozen=True):
    trace_id: str
    span_id: str
    parent_span_id: str = ""

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-01"

    @property
    def upstream_traceparent(self) -> str:
        """What the upstream call carries: the span of the upstream call (the OpenTelemetry CLIENT span, a child
        of this call's span) when the trace id is W3C's, so the upstream's own spans nest under it."""
        if _W3C_TRACE_ID.fullmatch(self.trace_id) and _W3C_SPAN_ID.fullmatch(self.span_id):
            return f"00-{self.trace_id}-{client_span_id(self.trace_id, self.span_id)}-01"
        return self.traceparent


def client_span_id(trace_id: str, span_id: str) -> str:
    """The span id of a call's upstream call, derived from the call's own: the same whenever it is computed (at
    the call, in the exporter, in GET /otel-traces), so nothing more needs storing."""
    digest = hashlib.sha256(f"{trace_id}:{span_id}:upstream".encode()).hexdigest()[:16]
    return digest if digest != "0" * 16 else "0" * 15 + "1"


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """(trace_id, parent span id) of a valid W3C traceparent, or None."""
    if not value:
        return None
    m = _TRACEPARENT.match(value.strip().lower())
    if not m or m.group(1) == "ff" or m.group(2) == "0" * 32 or m.group(3) == "0" * 16:
        return None
    return m.group(2), m.group(3)


def from_headers(traceparent: str | None, x_trace_id: str | None) -> TraceContext:
    parsed = parse_traceparent(traceparent)
    if parsed:
        return TraceContext(trace_id=parsed[0], span_id=new_span_id(), parent_span_id=parsed[1])
    if x_trace_id and _X_TRACE_ID.fullmatch(x_trace_id.strip()):
        return TraceContext(trace_id=x_trace_id.strip(), span_id=new_span_id())
    return TraceContext(trace_id=new_trace_id(), span_id=new_span_id())
