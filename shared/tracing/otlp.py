"""OTLP JSON for trace entries (CONTRACT 1.11) and the exporter behind `otel_endpoint`.

Endpoints: `stdout` (written to stderr: stdout carries the MCP stdio protocol), `http(s)://host:4318`
(POSTs to `<endpoint>/v1/traces` in batches), anything else is a file path that receives one export per line.
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
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

import httpx
import msgspec

from .entry import TraceEntry, parse_timestamp

__all__ = ["SERVICE_NAME", "OtlpExporter", "entries_to_otlp", "entry_to_span", "wrap_spans"]

log = logging.getLogger("flux7.tracing.otlp")

SERVICE_NAME = "flux7-mesh"
SCOPE_VERSION = "0.6.0"
_HEX = re.compile(r"^[0-9a-fA-F]+$")


def _is_hex(s: str, n: int) -> bool:
    return len(s) == n and bool(_HEX.match(s))


def _str(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _int(key: str, value: int) -> dict[str, Any]:
    # OTLP JSON carries 64-bit integers as strings.
    return {"key": key, "value": {"intValue": str(int(value))}}


def span_id_for(trace_id: str) -> str:
    """A span id derived from a trace id (its first 16 hex), so a call is addressable as a parent from its
    trace id alone; random when the trace id is malformed."""
    return trace_id[:16].lower() if len(trace_id) >= 16 and _HEX.match(trace_id) else secrets.token_hex(8)


def entry_to_span(entry: TraceEntry, parent_span_id: str = "") -> dict[str, Any]:
    """One span. parent_span_id, when given, is the stored span of the call behind the grant (lineage)."""
    trace_id = entry.trace_id.lower() if _is_hex(entry.trace_id, 32) else secrets.token_hex(16)
    span_id = entry.span_id.lower() if _is_hex(entry.span_id, 16) else span_id_for(trace_id)
    parent = ""
    if _is_hex(entry.parent_span_id, 16):
        parent = entry.parent_span_id.lower()  # the caller's traceparent keeps the caller's tree whole
    elif _is_hex(parent_span_id, 16):
        parent = parent_span_id.lower()
    elif _is_hex(entry.parent_trace_id, 32):
        parent = span_id_for(entry.parent_trace_id)

    attrs = [
        _str("agent.id", entry.agent_id),
        _str("tool.name", entry.tool),
        _str("policy.action", entry.policy),
        _str("policy.rule", entry.policy_rule),
        _int("http.status_code", entry.status_code),
        # OpenTelemetry GenAI conventions beside our own keys, so GenAI dashboards need no mapping.
        _str("gen_ai.operation.name", "execute_tool"),
        _str("gen_ai.tool.name", entry.tool),
        _str("gen_ai.agent.id", entry.agent_id),
    ]
    if entry.session_id:
        attrs.append(_str("session.id", entry.session_id))
    if entry.user_id:
        attrs.append(_str("enduser.id", entry.user_id))
    if entry.error:
        attrs.append(_str("error.message", entry.error))
    if entry.grant_id:
        attrs.append(_str("grant.id", entry.grant_id))
    if entry.parent_trace_id:
        attrs.append(_str("mesh.parent_trace_id", entry.parent_trace_id))
    if entry.approval_id:
        attrs.append(_str("approval.id", entry.approval_id))
    if entry.approval_status:
        attrs.append(_str("approval.status", entry.approval_status))
    if entry.approval_ms > 0:
        attrs.append(_int("approval.duration_ms", entry.approval_ms))
    if entry.estimated_input_tokens > 0:
        attrs.append(_int("llm.token.input", entry.estimated_input_tokens))
    if entry.estimated_output_tokens > 0:
        attrs.append(_int("llm.token.output", entry.estimated_output_tokens))
    if entry.estimated_input_tokens > 0:
        attrs.append(_int("gen_ai.usage.input_tokens", entry.estimated_input_tokens))
    if entry.estimated_output_tokens > 0:
        attrs.append(_int("gen_ai.usage.output_tokens", entry.estimated_output_tokens))

    end = parse_timestamp(entry.timestamp) or 0
    start = end - int(entry.latency_ms) * 1_000_000
    status: dict[str, Any] = {"code": 1}
    if entry.error or entry.policy == "deny":
        status = {"code": 2, "message": entry.error} if entry.error else {"code": 2}

    span: dict[str, Any] = {"traceId": trace_id, "spanId": span_id}
    if parent:
        span["parentSpanId"] = parent
    span.update(
        name=entry.tool,
        kind=3,
        startTimeUnixNano=str(start),
        endTimeUnixNano=str(end),
        attributes=attrs,
        status=status,
    )
    return span


def wrap_spans(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_str("service.name", SERVICE_NAME)]},
                "scopeSpans": [{"scope": {"name": SERVICE_NAME, "version": SCOPE_VERSION}, "spans": spans}],
            }
        ]
    }


def entries_to_otlp(entries: Iterable[TraceEntry], parent_spans: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One export with a span per entry. parent_spans maps a parent_trace_id to that call's stored span id."""
    parents = parent_spans or {}
    return wrap_spans([entry_to_span(e, parents.get(e.parent_trace_id, "")) for e in entries])


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
    batches (128, or every 2 s), retried on network errors, 429 and 5xx. A full queue drops the span: a tool
    call never waits on the collector. `export` is thread-safe and never blocks."""

    def __init__(
        self,
        endpoint: str,
        *,
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
        self.endpoint = endpoint
        self.is_http = endpoint.startswith(("http://", "https://"))
        self.url = endpoint.rstrip("/") + "/v1/traces" if self.is_http else ""
        self.headers = {"Content-Type": "application/json", **(headers or {})}
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
        self._queue: deque[dict[str, Any]] = deque()
        self._qlock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.sent = 0
        self.dropped = 0
        self.failed = 0

    # -- intake ----------------------------------------------------------------------------------------------

    def export(self, span: dict[str, Any]) -> None:
        if not self.is_http:
            self._write_now(span)
            return
        with self._qlock:
            if len(self._queue) >= self.queue_size:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 100 == 0:
                    log.warning("otel: queue full, span dropped (dropped_total=%d)", self.dropped)
                return
            self._queue.append(span)
            full = len(self._queue) >= self.batch_size
        if full and self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                self._loop.call_soon_threadsafe(self._wake.set)

    def _write_now(self, span: dict[str, Any]) -> None:
        data = msgspec.json.encode(wrap_spans([span])) + b"\n"
        if self.endpoint == "stdout":
            stream = self._stream or sys.stderr
            with self._file_lock:
                stream.write(data.decode())
                stream.flush()
            return
        try:
            Path(self.endpoint).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.endpoint, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)  # one write per export: O_APPEND keeps lines whole across workers
            finally:
                os.close(fd)
        except OSError as e:
            self.failed += 1
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

    def _take(self, n: int) -> list[dict[str, Any]]:
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

    async def _send(self, client: httpx.AsyncClient, spans: list[dict[str, Any]]) -> None:
        data = msgspec.json.encode(wrap_spans(spans))
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
