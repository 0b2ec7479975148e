from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import msgspec
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from shared.db import Database
from shared.tracing import OtlpExporter, TraceEntry, Tracer, entries_to_otlp, entry_to_span

from .conftest import Collector, make_settings

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "0af7651916cd43dd8448eb211c80319c"


def _parse(payload: Any) -> ExportTraceServiceRequest:
    """The official OTLP protobuf JSON parser: it refuses a malformed field (a bad int, a bad enum...)."""
    text = payload if isinstance(payload, str | bytes) else json.dumps(payload)
    return json_format.Parse(text, ExportTraceServiceRequest())


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


def _entry(**fields: Any) -> TraceEntry:
    base: dict[str, Any] = {
        "trace_id": TRACE,
        "agent_id": "claude",
        "tool": "fs.read",
        "policy": "allow",
        "policy_rule": "p",
        "status_code": 200,
        "latency_ms": 250,
        "timestamp": "2026-10-01T10:00:00.5Z",
    }
    return TraceEntry(**{**base, **fields})


def test_an_entry_becomes_a_span_the_official_parser_accepts() -> None:
    export = entries_to_otlp(
        [
            _entry(
                session_id="s1",
                estimated_input_tokens=12,
                approval_id="ap",
                approval_status="approved",
                approval_ms=900,
            )
        ]
    )
    raw = json.dumps(export)
    assert '"intValue": "200"' in raw  # 64-bit ints are strings in OTLP JSON
    req = _parse(raw)
    rs = req.resource_spans[0]
    assert _attrs(rs.resource) == {"service.name": "flux7-mesh"}
    scope = rs.scope_spans[0]
    assert (scope.scope.name, scope.scope.version) == ("flux7-mesh", "0.6.0")
    span = scope.spans[0]
    # OTLP JSON carries ids as hex where protobuf's JSON mapping expects base64, so read them from the JSON.
    raw_span = export["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert (raw_span["traceId"], raw_span["spanId"]) == (TRACE, TRACE[:16])
    assert span.name == "fs.read" and span.kind == 3 and span.status.code == 1
    assert span.end_time_unix_nano - span.start_time_unix_nano == 250_000_000
    attrs = _attrs(span)
    assert attrs["agent.id"] == "claude" and attrs["http.status_code"] == 200
    assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs["gen_ai.tool.name"] == "fs.read"
    assert attrs["gen_ai.agent.id"] == "claude" and attrs["session.id"] == "s1"
    assert attrs["approval.id"] == "ap" and attrs["approval.status"] == "approved"
    assert attrs["approval.duration_ms"] == 900
    assert attrs["llm.token.input"] == 12 and attrs["gen_ai.usage.input_tokens"] == 12
    assert "llm.token.output" not in attrs and "gen_ai.usage.output_tokens" not in attrs  # 0 is omitted


def test_a_denied_call_is_an_error_span_and_lineage_sets_the_parent() -> None:
    span = entry_to_span(_entry(policy="deny", error="nope", parent_trace_id=PARENT))
    assert span["status"] == {"code": 2, "message": "nope"}
    assert span["parentSpanId"] == PARENT[:16]
    assert entry_to_span(_entry(parent_trace_id=PARENT), "00f067aa0ba902b7")["parentSpanId"] == "00f067aa0ba902b7"
    caller = entry_to_span(_entry(span_id="b7ad6b7169203331", parent_span_id="00f067aa0ba902b7"))
    assert (caller["spanId"], caller["parentSpanId"]) == ("b7ad6b7169203331", "00f067aa0ba902b7")
    assert "parentSpanId" not in entry_to_span(_entry())
    _parse(wrap := entries_to_otlp([_entry(policy="deny", error="x", parent_trace_id=PARENT)]))
    assert wrap["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["parentSpanId"] == PARENT[:16]


def test_the_exporter_sends_full_batches_at_once_and_the_rest_on_stop(collector: Collector) -> None:
    async def scenario() -> None:
        exp = OtlpExporter(collector.url, batch_size=128, flush_interval=60)
        await exp.start()
        for i in range(300):
            exp.export(entry_to_span(_entry(trace_id=f"{i:032x}")))
        assert await asyncio.to_thread(collector.wait_for, lambda: len(collector.requests) >= 2)
        await exp.stop()
        assert exp.stats() == {"sent": 300, "dropped": 0, "failed": 0, "queued": 0}

    asyncio.run(scenario())
    sizes = [len(_parse(body).resource_spans[0].scope_spans[0].spans) for _, _, body in collector.requests]
    assert sizes == [128, 128, 44]
    assert all(path == "/v1/traces" for path, _, _ in collector.requests)


def test_a_partial_batch_leaves_on_the_flush_interval(collector: Collector) -> None:
    async def scenario() -> None:
        exp = OtlpExporter(collector.url, flush_interval=0.05)
        await exp.start()
        exp.export(entry_to_span(_entry()))
        assert await asyncio.to_thread(collector.wait_for, lambda: len(collector.requests) == 1)
        await exp.stop()

    asyncio.run(scenario())


def test_503_and_429_are_retried_and_a_400_is_not(collector: Collector) -> None:
    collector.statuses = [503, 429, 503]

    async def scenario() -> OtlpExporter:
        exp = OtlpExporter(collector.url, backoff=0.01, flush_interval=60)
        await exp.start()
        exp.export(entry_to_span(_entry()))
        await exp.stop()
        return exp

    first = asyncio.run(scenario())
    assert collector.attempts == 4 and len(collector.requests) == 1 and first.sent == 1
    collector.statuses = [400]
    second = asyncio.run(scenario())
    assert collector.attempts == 5 and (second.sent, second.failed) == (0, 1)
    collector.statuses = [503] * 4
    third = asyncio.run(scenario())  # 1 try + 3 retries, then given up
    assert collector.attempts == 9 and (third.sent, third.failed) == (0, 1)


def test_network_errors_are_retried_then_counted_as_failed() -> None:
    async def scenario() -> OtlpExporter:
        exp = OtlpExporter("http://127.0.0.1:9", backoff=0.01, flush_interval=60)  # nothing listens on port 9
        await exp.start()
        exp.export(entry_to_span(_entry()))
        await exp.stop()
        return exp

    assert asyncio.run(scenario()).failed == 1


def test_the_tracer_exports_recorded_calls_with_the_configured_headers(tmp_path: Path, collector: Collector) -> None:
    settings = make_settings(
        tmp_path,
        otel_endpoint=collector.url,
        otel_headers={"Authorization": "Basic abc", "X-Scope-OrgID": "tenant-42"},
    )
    db = Database(tmp_path / "flux7.db")
    tracer = Tracer(settings, db)

    async def scenario() -> None:
        await tracer.start()
        parent = tracer.record(_entry(trace_id=PARENT, span_id="00f067aa0ba902b7"))
        tracer.record(_entry(parent_trace_id=parent.trace_id, grant_id="g1"))
        await tracer.stop()

    asyncio.run(scenario())
    db.close()
    [(path, headers, body)] = collector.requests
    assert path == "/v1/traces"
    assert headers["authorization"] == "Basic abc" and headers["x-scope-orgid"] == "tenant-42"
    assert headers["content-type"] == "application/json"
    assert len(_parse(body).resource_spans[0].scope_spans[0].spans) == 2
    spans = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert spans[1]["parentSpanId"] == "00f067aa0ba902b7"  # lineage resolved to the parent's stored span


def test_a_file_endpoint_gets_one_export_per_line_and_stdout_goes_to_a_stream(tmp_path: Path) -> None:
    out = tmp_path / "otel" / "spans.jsonl"
    exp = OtlpExporter(str(out))
    exp.export(entry_to_span(_entry()))
    exp.export(entry_to_span(_entry(tool="fs.write")))
    lines = out.read_text().splitlines()
    assert [_parse(x).resource_spans[0].scope_spans[0].spans[0].name for x in lines] == [
        "fs.read",
        "fs.write",
    ]
    stream = io.StringIO()
    OtlpExporter("stdout", stream=stream).export(entry_to_span(_entry()))
    assert msgspec.json.decode(stream.getvalue())["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "fs.read"


def test_a_full_queue_drops_new_spans_instead_of_blocking() -> None:
    exp = OtlpExporter("http://127.0.0.1:9", queue_size=3)
    for _ in range(5):
        exp.export(entry_to_span(_entry()))
    assert exp.stats()["queued"] == 3 and exp.dropped == 2
