"""OpenTelemetry for trace entries: the spans of one governed call, OTLP JSON and OTLP protobuf, and the exporter
behind `otel_endpoint` / `otel_traces_endpoint`.

A call is a SERVER span `tools/call <tool>` (the request the mesh received) and, when it was forwarded, a CLIENT
span `execute_tool <tool>` under it (the upstream call), with the OpenTelemetry GenAI and MCP semantic conventions
beside flux7's own attributes (docs/traces.md).

Endpoints: `stdout` (written to stderr: stdout carries the MCP stdio protocol), `http(s)://host:4318` (POSTs to
`<endpoint>/v1/traces` in batches, protobuf or JSON), anything else is a file path that receives one JSON export
per line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import ssl
import sys
import threading
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

import httpx
import msgspec

from flux7.shared import __version__
from flux7.shared.store.private_files import PRIVATE_FILE, private_dir
from flux7.shared.tracecontext import client_span_id
from flux7.shared.tracing.entry import TraceEntry, parse_timestamp

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "INSTANCE_ID",
    "SCOPE_NAME",
    "OtlpExporter",
    "Span",
    "entries_to_otlp",
    "otlp_json",
    "otlp_protobuf",
    "resource_attributes",
    "spans_for",
]

log = logging.getLogger("flux7.tracing.otlp")

DEFAULT_SERVICE_NAME = "flux7"
SCOPE_NAME = "flux7"
# service.instance.id: one per process (each granian worker is an instance), the same for all its exports.
INSTANCE_ID = str(uuid.uuid4())
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_OK, STATUS_ERROR = 1, 2
JSON = "http/json"
PROTOBUF = "http/protobuf"
_HEX = re.compile(r"^[0-9a-fA-F]+$")
CONTROL_PREFIX = "mesh."  # the tool names of control-plane events (mesh.halt, mesh.grant, ...)


def _is_hex(s: str, n: int) -> bool:
    return len(s) == n and bool(_HEX.match(s))


def span_id_for(trace_id: str) -> str:
    """A span id derived from a trace id (its first 16 hex), so a call is addressable as a parent from its
    trace id alone; random when the trace id is malformed."""
    return trace_id[:16].lower() if len(trace_id) >= 16 and _HEX.fullmatch(trace_id) else secrets.token_hex(8)


class Span(msgspec.Struct, kw_only=True):
    """One span, independent of its encoding (ids in hex, times in Unix nanoseconds)."""

    trace_id: str
    span_id: str
    parent_span_id: str = ""
    name: str
    kind: int
    start: int
    end: int
    attributes: list[tuple[str, Any]]
    status_code: int = STATUS_OK
    status_message: str = ""


def resource_attributes(service_name: str = "", extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The resource of every export: `extra` (otel_resource_attributes merged with OTEL_RESOURCE_ATTRIBUTES), then
    service.name (the configured name, else extra's, else flux7), service.version and service.instance.id."""
    attrs = dict(extra or {})
    attrs["service.name"] = service_name or attrs.get("service.name") or DEFAULT_SERVICE_NAME
    attrs["service.version"] = __version__
    attrs.setdefault("service.instance.id", INSTANCE_ID)
    return attrs


# -- the spans of a call ----------------------------------------------------------------------------------------


def _refusal(entry: TraceEntry) -> str:
    """error.type of a call the mesh stopped itself: the kind of refusal."""
    if entry.policy in ("deny", "rate_limited", "halted"):
        return entry.policy
    if entry.policy == "human_approval":
        if entry.approval_status in ("denied", "timeout"):
            return f"approval_{entry.approval_status}"
        if entry.error and entry.upstream is None:
            return "approval_unavailable"  # no approval queue: human_approval denies (fail closed)
    return ""


def _server_error(entry: TraceEntry) -> str:
    refusal = _refusal(entry)
    if refusal:
        return refusal
    if entry.upstream is not None and entry.upstream.error_type:
        return entry.upstream.error_type
    if entry.error:
        return str(entry.status_code) if entry.status_code >= 400 else "_OTHER"
    return ""


def _flux7_attributes(entry: TraceEntry) -> list[tuple[str, Any]]:
    attrs: list[tuple[str, Any]] = [
        ("agent.id", entry.agent_id),
        ("tool.name", entry.tool),
        ("policy.action", entry.policy),
        ("policy.rule", entry.policy_rule),
        ("gen_ai.agent.id", entry.agent_id),
    ]
    optional: list[tuple[str, Any]] = [
        ("session.id", entry.session_id),
        ("enduser.id", entry.user_id),
        ("error.message", entry.error),
        ("grant.id", entry.grant_id),
        ("mesh.parent_trace_id", entry.parent_trace_id),
        ("approval.id", entry.approval_id),
        ("approval.status", entry.approval_status),
        ("approval.approved_by", entry.approved_by),
        ("approval.duration_ms", entry.approval_ms),
        ("llm.token.input", entry.estimated_input_tokens),
        ("llm.token.output", entry.estimated_output_tokens),
        ("gen_ai.usage.input_tokens", entry.estimated_input_tokens),
        ("gen_ai.usage.output_tokens", entry.estimated_output_tokens),
    ]
    attrs.extend((k, v) for k, v in optional if v)  # each left out when empty or 0
    return attrs


def spans_for(entry: TraceEntry, parent_span_id: str = "") -> list[Span]:
    """The SERVER span of a call and, when it was forwarded upstream, its CLIENT child. parent_span_id, when
    given, is the stored span of the call behind the grant (lineage)."""
    trace_id = entry.trace_id.lower() if _is_hex(entry.trace_id, 32) else secrets.token_hex(16)
    span_id = entry.span_id.lower() if _is_hex(entry.span_id, 16) else span_id_for(trace_id)
    parent = ""
    if _is_hex(entry.parent_span_id, 16):
        parent = entry.parent_span_id.lower()  # the caller's traceparent keeps the caller's tree whole
    elif _is_hex(parent_span_id, 16):
        parent = parent_span_id.lower()
    elif _is_hex(entry.parent_trace_id, 32):
        parent = span_id_for(entry.parent_trace_id)

    request = entry.request
    transport = request.transport if request is not None else ""
    received = parse_timestamp(request.received_at) if request is not None and request.received_at else None
    if received is not None:  # a revision keeps the first record's timestamp: the call's span starts on arrival
        start, end = received, received + int(entry.latency_ms) * 1_000_000
    else:
        end = parse_timestamp(entry.timestamp) or 0
        start = end - int(entry.latency_ms) * 1_000_000
    if request is None and entry.tool.startswith(CONTROL_PREFIX):
        # a control-plane event (shared/gate/audit.py: a halt, a grant, a pin accepted...), not a tool call
        return [
            Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name=entry.tool,
                kind=KIND_INTERNAL,
                start=start,
                end=end,
                attributes=_flux7_attributes(entry),
            )
        ]
    attrs: list[tuple[str, Any]] = []
    if transport in ("mcp", "stdio") and request is not None:
        attrs.append(("mcp.method.name", "tools/call"))
        if request.mcp_session_id:
            attrs.append(("mcp.session.id", request.mcp_session_id))
        if request.mcp_protocol_version:
            attrs.append(("mcp.protocol.version", request.mcp_protocol_version))
        if request.jsonrpc_id:
            attrs.append(("jsonrpc.request.id", request.jsonrpc_id))
        attrs.append(("network.transport", "pipe" if transport == "stdio" else "tcp"))
        if transport == "mcp":
            attrs.append(("network.protocol.name", "http"))
    attrs += [("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", entry.tool)]
    error_type = _server_error(entry)
    if error_type:
        attrs.append(("error.type", error_type))
    if request is not None and request.status:
        attrs.append(("http.response.status_code", request.status))
    elif request is None and entry.status_code:
        attrs.append(("http.response.status_code", entry.status_code))  # a line written before `request`
    if transport:
        attrs.append(("flux7.transport", transport))
    attrs += _flux7_attributes(entry)

    server = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=f"tools/call {entry.tool}",
        kind=KIND_SERVER,
        start=start,
        end=end,
        attributes=attrs,
        status_code=STATUS_ERROR if error_type else STATUS_OK,
        status_message=entry.error if error_type else "",
    )
    up = entry.upstream
    if up is None or not up.source:
        return [server]

    c_start = start + round(up.start_ms * 1_000_000)
    c_end = c_start + round(up.ms * 1_000_000)
    if c_end > end:  # latency_ms is whole milliseconds: keep the child inside its parent
        c_start, c_end = max(start, c_start - (c_end - end)), end
    c_attrs: list[tuple[str, Any]] = [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", entry.tool),
    ]
    if up.source == "mcp":
        c_attrs.append(("mcp.method.name", "tools/call"))
    if up.error_type:
        c_attrs.append(("error.type", up.error_type))
    if up.address:
        c_attrs.append(("server.address", up.address))
        if up.port:
            c_attrs.append(("server.port", up.port))
    if up.transport:
        c_attrs.append(("network.transport", up.transport))
    if up.transport == "tcp":
        c_attrs.append(("network.protocol.name", "http"))
    if up.source == "openapi" and entry.status_code:
        c_attrs.append(("http.response.status_code", entry.status_code))  # the backend's own status
    if up.source == "cli" and entry.exit_code is not None:
        c_attrs.append(("process.exit.code", entry.exit_code))
    c_attrs += [("upstream.name", up.name), ("upstream.source", up.source), ("agent.id", entry.agent_id)]
    client = Span(
        trace_id=trace_id,
        span_id=client_span_id(trace_id, span_id),
        parent_span_id=span_id,
        name=f"execute_tool {entry.tool}",
        kind=KIND_CLIENT,
        start=c_start,
        end=c_end,
        attributes=c_attrs,
        status_code=STATUS_ERROR if up.error_type else STATUS_OK,
        status_message=entry.error if up.error_type else "",
    )
    return [server, client]


# -- encodings --------------------------------------------------------------------------------------------------


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # OTLP JSON carries 64-bit integers as strings
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _json_attrs(attrs: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attrs]


def _json_span(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {"traceId": span.trace_id, "spanId": span.span_id}
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id
    status: dict[str, Any] = {"code": span.status_code}
    if span.status_message:
        status["message"] = span.status_message
    out.update(
        name=span.name,
        kind=span.kind,
        startTimeUnixNano=str(span.start),
        endTimeUnixNano=str(span.end),
        attributes=_json_attrs(span.attributes),
        status=status,
    )
    return out


def otlp_json(spans: Iterable[Span], resource: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An OTLP/JSON ExportTraceServiceRequest (ids in hex, 64-bit integers as strings)."""
    res = resource if resource is not None else resource_attributes()
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _json_attrs(res.items())},
                "scopeSpans": [
                    {"scope": {"name": SCOPE_NAME, "version": __version__}, "spans": [_json_span(s) for s in spans]}
                ],
            }
        ]
    }


def otlp_protobuf(spans: Iterable[Span], resource: Mapping[str, str] | None = None) -> bytes:
    """The same request as OTLP protobuf bytes, built with opentelemetry-proto's generated classes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    def value(v: Any) -> AnyValue:
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        if isinstance(v, float):
            return AnyValue(double_value=v)
        return AnyValue(string_value=str(v))

    def kvs(attrs: Iterable[tuple[str, Any]]) -> list[KeyValue]:
        return [KeyValue(key=k, value=value(v)) for k, v in attrs]

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    res = resource if resource is not None else resource_attributes()
    rs.resource.attributes.extend(kvs(res.items()))
    ss = rs.scope_spans.add()
    ss.scope.name = SCOPE_NAME
    ss.scope.version = __version__
    for s in spans:
        ss.spans.append(
            PbSpan(
                trace_id=bytes.fromhex(s.trace_id),
                span_id=bytes.fromhex(s.span_id),
                parent_span_id=bytes.fromhex(s.parent_span_id) if s.parent_span_id else b"",
                name=s.name,
                kind=s.kind,  # type: ignore[arg-type]
                start_time_unix_nano=max(s.start, 0),
                end_time_unix_nano=max(s.end, 0),
                attributes=kvs(s.attributes),
                status=Status(code=s.status_code, message=s.status_message),  # type: ignore[arg-type]
            )
        )
    encoded: bytes = req.SerializeToString()
    return encoded


def entries_to_otlp(
    entries: Iterable[TraceEntry],
    parent_spans: Mapping[str, str] | None = None,
    resource: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One OTLP/JSON export with the spans of each entry. parent_spans maps a parent_trace_id to that call's
    stored span id."""
    parents = parent_spans or {}
    spans = [s for e in entries for s in spans_for(e, parents.get(e.parent_trace_id, ""))]
    return otlp_json(spans, resource)


def _ssl_verify(ca_cert: str, insecure: bool) -> ssl.SSLContext | bool:
    if insecure:
        return False  # operator opt-in, for a self-signed local collector
    ctx = ssl.create_default_context()
    if ca_cert:
        try:
            ctx.load_verify_locations(cafile=ca_cert)  # appended to the system roots
        except (OSError, ssl.SSLError) as e:
            # Losing spans must never take the mesh down: an unreadable CA is logged, not fatal.
            log.error("otel: cannot use ca cert %s: %s", ca_cert, e)
    return ctx


class OtlpExporter:
    """Spans leave at once for stdout and files; for OTLP/HTTP they wait in a bounded queue and leave in
    batches (128, or every 2 s), as protobuf (`http/protobuf`, the OTLP default) or JSON (`http/json`), retried
    on network errors, 429 and 5xx. A full queue drops the spans: a tool call never waits on the collector.
    `export` is thread-safe and never blocks.

    `endpoint` is a base URL (`/v1/traces` is appended) unless `full_url` says it is the traces URL itself
    (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)."""

    def __init__(
        self,
        endpoint: str,
        *,
        full_url: bool = False,
        protocol: str = PROTOBUF,
        resource: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        ca_cert: str = "",
        insecure_skip_verify: bool = False,
        batch_size: int = 128,
        flush_interval: float = 2.0,
        max_attempts: int = 4,
        backoff: float = 0.5,
        queue_size: int = 2048,
        timeout: float = 5.0,
        close_wait: float = 5.0,
        stream: TextIO | None = None,
    ) -> None:
        if protocol not in (PROTOBUF, JSON):
            raise ValueError(f"OTLP protocol must be {PROTOBUF} or {JSON}, not {protocol!r}")
        self.endpoint = endpoint
        self.is_http = endpoint.startswith(("http://", "https://"))
        self.url = (endpoint if full_url else endpoint.rstrip("/") + "/v1/traces") if self.is_http else ""
        self.protocol = protocol
        self.resource = dict(resource) if resource is not None else resource_attributes()
        content_type = "application/x-protobuf" if protocol == PROTOBUF else "application/json"
        self.headers = {**(headers or {}), "Content-Type": content_type}
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.queue_size = queue_size
        self.timeout = timeout
        self.close_wait = close_wait
        self._verify = _ssl_verify(ca_cert, insecure_skip_verify) if self.is_http else True
        self._stream = stream
        self._file_lock = threading.Lock()
        self._queue: deque[Span] = deque()
        self._qlock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.sent = 0
        self.dropped = 0
        self.failed = 0

    def encode(self, spans: list[Span]) -> bytes:
        if self.protocol == PROTOBUF:
            return otlp_protobuf(spans, self.resource)
        return msgspec.json.encode(otlp_json(spans, self.resource))

    # -- intake ----------------------------------------------------------------------------------------------

    def export(self, spans: Iterable[Span]) -> None:
        """The spans of one call: written at once (stdout, file) or queued whole (HTTP)."""
        batch = list(spans)
        if not batch:
            return
        if not self.is_http:
            self._write_now(batch)
            return
        with self._qlock:
            if len(self._queue) + len(batch) > self.queue_size:
                self.dropped += len(batch)
                if self.dropped == len(batch) or self.dropped // 100 != (self.dropped - len(batch)) // 100:
                    log.warning("otel: queue full, spans dropped (dropped_total=%d)", self.dropped)
                return
            self._queue.extend(batch)
            full = len(self._queue) >= self.batch_size
        if full and self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                self._loop.call_soon_threadsafe(self._wake.set)

    def _write_now(self, spans: list[Span]) -> None:
        data = msgspec.json.encode(otlp_json(spans, self.resource)) + b"\n"
        if self.endpoint == "stdout":
            stream = self._stream or sys.stderr
            with self._file_lock:
                stream.write(data.decode())
                stream.flush()
            return
        try:
            private_dir(Path(self.endpoint).parent)
            fd = os.open(self.endpoint, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            try:
                os.write(fd, data)  # one write per export: O_APPEND keeps lines whole across workers
            finally:
                os.close(fd)
        except OSError as e:
            self.failed += len(spans)
            log.error("otel: cannot write %s: %s", self.endpoint, e)

    # -- delivery --------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if not self.is_http or self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="otlp-exporter")

    async def stop(self) -> None:
        """Drain the queue (bounded by close_wait) and log what was sent, dropped and failed."""
        if self._task is None:
            return
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=self.close_wait)
        except TimeoutError:
            log.warning("otel: close timed out, %d spans left in queue", len(self._queue))
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None
        log.info("otel: exporter closed (sent=%d dropped=%d failed=%d)", self.sent, self.dropped, self.failed)

    def _take(self, n: int) -> list[Span]:
        with self._qlock:
            return [self._queue.popleft() for _ in range(min(n, len(self._queue)))]

    def queued(self) -> int:
        with self._qlock:
            return len(self._queue)

    async def _run(self) -> None:
        assert self._wake is not None
        async with httpx.AsyncClient(verify=self._verify, timeout=self.timeout) as client:
            while True:
                timed_out = False
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=self.flush_interval)
                except TimeoutError:
                    timed_out = True
                self._wake.clear()
                while self.queued() >= self.batch_size:
                    await self._send(client, self._take(self.batch_size))
                if timed_out or self._stopping:
                    while batch := self._take(self.batch_size):
                        await self._send(client, batch)
                if self._stopping:
                    return

    async def _send(self, client: httpx.AsyncClient, spans: list[Span]) -> None:
        data = self.encode(spans)
        last = ""
        for attempt in range(self.max_attempts):
            if attempt and not self._stopping:  # shutting down: one immediate try each, no waiting
                await asyncio.sleep(self.backoff * (2 ** (attempt - 1)))
            try:
                resp = await client.post(self.url, content=data, headers=self.headers)
            except httpx.HTTPError as e:
                last = str(e) or e.__class__.__name__
                continue
            if resp.status_code < 300:
                self.sent += len(spans)
                return
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}"
                continue
            # Another 4xx: the collector refuses the payload, and retrying would not change its mind.
            self.failed += len(spans)
            log.warning("otel: export rejected by %s: HTTP %d (%d spans)", self.url, resp.status_code, len(spans))
            return
        self.failed += len(spans)
        log.warning(
            "otel: export to %s failed after %d attempts: %s (%d spans)",
            self.url,
            self.max_attempts,
            last,
            len(spans),
        )

    def stats(self) -> dict[str, int]:
        return {"sent": self.sent, "dropped": self.dropped, "failed": self.failed, "queued": self.queued()}
