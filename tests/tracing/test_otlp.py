"""The spans of a call (GenAI and MCP semantic conventions), their OTLP protobuf and JSON encodings decoded by
opentelemetry-proto, and the exporter's delivery to a real loopback collector stand-in."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import msgspec
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flux7.shared import __version__
from flux7.shared.store.db import Database
from flux7.shared.tracecontext import TraceContext, client_span_id
from flux7.shared.tracing import (
    Egress,
    Ingress,
    OtlpExporter,
    TraceEntry,
    Tracer,
    entries_to_otlp,
    otlp_json,
    otlp_protobuf,
    resource_attributes,
    spans_for,
)
from flux7.shared.tracing.otlp import INSTANCE_ID

from .conftest import Collector, make_settings

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "b7ad6b7169203331"
PARENT = "0af7651916cd43dd8448eb211c80319c"
SERVER, CLIENT = 2, 3


def _parse(payload: Any) -> ExportTraceServiceRequest:
    """The official OTLP protobuf JSON parser: it refuses a malformed field (a bad int, a bad enum...)."""
    text = payload if isinstance(payload, str | bytes) else json.dumps(payload)
    return json_format.Parse(text, ExportTraceServiceRequest())


def _attrs(item: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in item.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


def _entry(**fields: Any) -> TraceEntry:
    base: dict[str, Any] = {
        "trace_id": TRACE,
        "span_id": SPAN,
        "agent_id": "claude",
        "tool": "fs.read",
        "policy": "allow",
        "policy_rule": "p",
        "status_code": 200,
        "latency_ms": 250,
        "timestamp": "2026-10-01T10:00:00.5Z",
    }
    return TraceEntry(**{**base, **fields})


def _mcp_call(**fields: Any) -> TraceEntry:
    """A call that came over /mcp and was forwarded to a stdio MCP server."""
    return _entry(
        session_id="s1",
        request=Ingress(transport="mcp", mcp_session_id="sess-9", mcp_protocol_version="2025-06-18", jsonrpc_id="7"),
        upstream=Egress(name="fs", source="mcp", transport="pipe", start_ms=10.5, ms=200.25),
        **fields,
    )


def _decode(data: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(resource attributes, {span name: span}) of a protobuf export."""
    req = ExportTraceServiceRequest.FromString(data)
    [rs] = req.resource_spans
    [ss] = rs.scope_spans
    assert (ss.scope.name, ss.scope.version) == ("flux7", __version__)
    return _attrs(rs.resource), {s.name: s for s in ss.spans}


def test_a_call_over_mcp_is_a_server_span_with_its_upstream_call_as_client_child() -> None:
    resource, spans = _decode(otlp_protobuf(spans_for(_mcp_call(estimated_input_tokens=12))))
    assert resource == {"service.name": "flux7", "service.version": __version__, "service.instance.id": INSTANCE_ID}
    server, client = spans["tools/call fs.read"], spans["execute_tool fs.read"]
    assert (server.kind, client.kind) == (SERVER, CLIENT)
    assert server.trace_id.hex() == client.trace_id.hex() == TRACE
    assert server.span_id.hex() == SPAN and server.parent_span_id == b""
    assert client.parent_span_id.hex() == SPAN and client.span_id.hex() == client_span_id(TRACE, SPAN)
    # the upstream was called with this span as its parent (the traceparent the pipeline sends)
    assert TraceContext(TRACE, SPAN).upstream_traceparent == f"00-{TRACE}-{client.span_id.hex()}-01"
    assert server.end_time_unix_nano - server.start_time_unix_nano == 250_000_000
    assert client.start_time_unix_nano - server.start_time_unix_nano == 10_500_000
    assert client.end_time_unix_nano - client.start_time_unix_nano == 200_250_000
    attrs = _attrs(server)
    assert {k: attrs[k] for k in attrs if k.startswith(("mcp.", "jsonrpc.", "gen_ai.", "network."))} == {
        "mcp.method.name": "tools/call",
        "mcp.session.id": "sess-9",
        "mcp.protocol.version": "2025-06-18",
        "jsonrpc.request.id": "7",
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "fs.read",
        "gen_ai.agent.id": "claude",
        "gen_ai.usage.input_tokens": 12,
    }
    # flux7's own attributes stay; the deprecated http.status_code is gone; no error.type on success
    assert attrs["agent.id"] == "claude" and attrs["policy.action"] == "allow" and attrs["policy.rule"] == "p"
    assert attrs["session.id"] == "s1" and attrs["flux7.transport"] == "mcp"
    assert "http.status_code" not in attrs and "error.type" not in attrs and "http.response.status_code" not in attrs
    assert server.status.code == 1 and client.status.code == 1
    c = _attrs(client)
    assert c["gen_ai.operation.name"] == "execute_tool" and c["gen_ai.tool.name"] == "fs.read"
    assert c["mcp.method.name"] == "tools/call" and c["network.transport"] == "pipe"
    assert c["upstream.name"] == "fs" and c["upstream.source"] == "mcp" and "server.address" not in c


def test_a_rest_call_to_an_http_upstream_carries_status_codes_and_the_server_address() -> None:
    entry = _entry(
        status_code=500,
        error="backend returned HTTP 500",
        request=Ingress(transport="rest", status=502),
        upstream=Egress(
            name="spec.json",
            source="openapi",
            address="127.0.0.1",
            port=8123,
            transport="tcp",
            start_ms=1,
            ms=5,
            error_type="500",
        ),
    )
    _, spans = _decode(otlp_protobuf(spans_for(entry)))
    server, client = _attrs(spans["tools/call fs.read"]), _attrs(spans["execute_tool fs.read"])
    assert server["http.response.status_code"] == 502 and server["error.type"] == "500"
    assert "mcp.method.name" not in server and "jsonrpc.request.id" not in server
    assert client["http.response.status_code"] == 500 and client["error.type"] == "500"
    assert (client["server.address"], client["server.port"], client["network.transport"]) == ("127.0.0.1", 8123, "tcp")
    assert "mcp.method.name" not in client
    for span in spans.values():
        assert (span.status.code, span.status.message) == (2, "backend returned HTTP 500")


def test_refusals_are_server_spans_only_with_the_refusal_as_error_type() -> None:
    rest = Ingress(transport="rest", status=403)
    cases = {
        "deny": _entry(policy="deny", error="nope", request=rest),
        "rate_limited": _entry(policy="rate_limited", error="slow down", request=Ingress(transport="rest", status=429)),
        "halted": _entry(policy="halted", error="stop", request=rest),
        "approval_denied": _entry(policy="human_approval", approval_status="denied", error="approval denied by b"),
        "approval_timeout": _entry(policy="human_approval", approval_status="timeout", error="approval timed out"),
        "approval_unavailable": _entry(policy="human_approval", error="approval queue not available"),
    }
    for error_type, entry in cases.items():
        [span] = spans_for(entry)
        attrs = dict(span.attributes)
        assert (span.kind, attrs["error.type"], span.status_code) == (SERVER, error_type, 2), error_type
        assert span.status_message == entry.error
    pending = spans_for(
        _entry(policy="human_approval", approval_id="ap", request=Ingress(transport="rest", status=202))
    )
    assert "error.type" not in dict(pending[0].attributes) and pending[0].status_code == 1


def test_an_mcp_tool_error_and_a_timeout_are_errors_of_both_spans() -> None:
    for kind in ("tool_error", "timeout", "-32042"):
        up = Egress(name="fs", source="mcp", transport="pipe", ms=3, error_type=kind)
        server, client = spans_for(_entry(request=Ingress(transport="stdio"), upstream=up))
        assert dict(server.attributes)["error.type"] == dict(client.attributes)["error.type"] == kind
        assert dict(server.attributes)["network.transport"] == "pipe"  # mesh7 --mcp: stdio
        assert server.status_code == client.status_code == 2


def test_the_json_encoding_is_the_same_request_and_the_official_parser_accepts_it() -> None:
    entry = _mcp_call(parent_trace_id=PARENT, grant_id="g1", approval_ms=900, approval_id="ap")
    export = entries_to_otlp([entry], resource=resource_attributes("mesh-prod", {"deployment.environment": "prod"}))
    raw = json.dumps(export)
    assert '"intValue": "900"' in raw  # 64-bit ints are strings in OTLP JSON
    req = _parse(raw)
    assert _attrs(req.resource_spans[0].resource) == {
        "deployment.environment": "prod",
        "service.name": "mesh-prod",
        "service.version": __version__,
        "service.instance.id": INSTANCE_ID,
    }
    spans = export["resourceSpans"][0]["scopeSpans"][0]["spans"]
    # OTLP JSON carries ids as hex where protobuf's JSON mapping expects base64, so read them from the JSON.
    assert [(s["name"], s["kind"], s["spanId"], s.get("parentSpanId")) for s in spans] == [
        ("tools/call fs.read", SERVER, SPAN, PARENT[:16]),  # lineage: the call behind the grant
        ("execute_tool fs.read", CLIENT, client_span_id(TRACE, SPAN), SPAN),
    ]
    parsed = {s.name: _attrs(s) for s in req.resource_spans[0].scope_spans[0].spans}
    assert (
        parsed["tools/call fs.read"]["grant.id"] == "g1" and parsed["tools/call fs.read"]["approval.duration_ms"] == 900
    )
    # the same spans as protobuf decode to the same request
    pb = ExportTraceServiceRequest.FromString(otlp_protobuf(spans_for(entry, ""), resource_attributes("mesh-prod")))
    assert [s.name for s in pb.resource_spans[0].scope_spans[0].spans] == [s["name"] for s in spans]


def test_resource_service_name_precedence() -> None:
    assert resource_attributes()["service.name"] == "flux7"
    assert resource_attributes("", {"service.name": "from-attrs"})["service.name"] == "from-attrs"
    assert resource_attributes("named", {"service.name": "from-attrs"})["service.name"] == "named"


def test_a_line_written_before_request_and_upstream_still_exports_one_server_span() -> None:
    [span] = spans_for(_entry(span_id="", parent_span_id="00f067aa0ba902b7"))
    assert (span.name, span.kind, span.span_id, span.parent_span_id) == (
        "tools/call fs.read",
        SERVER,
        TRACE[:16],
        "00f067aa0ba902b7",
    )
    assert dict(span.attributes)["http.response.status_code"] == 200


def test_the_exporter_sends_protobuf_by_default_and_json_when_asked(collector: Collector) -> None:
    async def send(protocol: str, **kw: Any) -> None:
        exp = OtlpExporter(collector.url, protocol=protocol, flush_interval=60, **kw)
        await exp.start()
        exp.export(spans_for(_mcp_call()))
        await exp.stop()
        assert exp.sent == 2

    asyncio.run(send("http/protobuf", headers={"Authorization": "Basic abc"}))
    asyncio.run(send("http/json"))
    asyncio.run(send("http/protobuf", full_url=True))
    (p1, h1, b1), (p2, h2, b2), (p3, _, b3) = collector.requests
    assert (p1, h1["content-type"], h1["authorization"]) == ("/v1/traces", "application/x-protobuf", "Basic abc")
    assert [s.kind for s in _decode(b1)[1].values()] == [SERVER, CLIENT]
    assert (p2, h2["content-type"]) == ("/v1/traces", "application/json")
    assert [s.name for s in _parse(b2).resource_spans[0].scope_spans[0].spans] == [
        "tools/call fs.read",
        "execute_tool fs.read",
    ]
    assert p3 == "/" and b3 == b1  # a traces endpoint is used as given


def test_the_exporter_sends_full_batches_at_once_and_the_rest_on_stop(collector: Collector) -> None:
    async def scenario() -> None:
        exp = OtlpExporter(collector.url, batch_size=128, flush_interval=60)
        await exp.start()
        for i in range(150):
            exp.export(spans_for(_entry(trace_id=f"{i:032x}", span_id="")))
        assert await asyncio.to_thread(collector.wait_for, lambda: len(collector.requests) == 1)
        await exp.stop()
        assert exp.stats() == {"sent": 150, "dropped": 0, "failed": 0, "queued": 0}

    asyncio.run(scenario())
    sizes = [
        len(ExportTraceServiceRequest.FromString(b).resource_spans[0].scope_spans[0].spans)
        for *_, b in collector.requests
    ]
    assert sizes == [128, 22]


def test_a_partial_batch_leaves_on_the_flush_interval(collector: Collector) -> None:
    async def scenario() -> None:
        exp = OtlpExporter(collector.url, flush_interval=0.05)
        await exp.start()
        exp.export(spans_for(_entry()))
        await asyncio.to_thread(collector.wait_for, lambda: len(collector.requests) == 1)
        await exp.stop()

    asyncio.run(scenario())
    assert len(collector.requests) == 1


def test_503_and_429_are_retried_and_a_400_is_not(collector: Collector) -> None:
    collector.statuses = [503, 429]

    async def scenario() -> OtlpExporter:
        exp = OtlpExporter(collector.url, backoff=0.01, flush_interval=60)
        await exp.start()
        exp.export(spans_for(_entry()))
        await exp.stop()
        return exp

    exp = asyncio.run(scenario())
    assert collector.attempts == 3 and exp.sent == 1 and exp.failed == 0
    collector.statuses = [400]
    exp = asyncio.run(scenario())
    assert collector.attempts == 4 and exp.failed == 1


def test_network_errors_are_retried_then_counted_as_failed() -> None:
    async def scenario() -> OtlpExporter:
        exp = OtlpExporter("http://127.0.0.1:9", backoff=0.01, flush_interval=60)  # nothing listens on port 9
        await exp.start()
        exp.export(spans_for(_entry()))
        await exp.stop()
        return exp

    assert asyncio.run(scenario()).failed == 1


def test_the_tracer_exports_a_call_once_when_it_is_complete(tmp_path: Path, collector: Collector) -> None:
    settings = make_settings(
        tmp_path,
        otel_endpoint=collector.url,
        otel_protocol="http/json",
        otel_headers={"X-Scope-OrgID": "tenant-42"},
        otel_service_name="mesh-a",
    )
    db = Database(tmp_path / "flux7.db")
    tracer = Tracer(settings, db)

    async def scenario() -> None:
        await tracer.start()
        parent = tracer.record(_entry(trace_id=PARENT, span_id="00f067aa0ba902b7"))
        tracer.record(_entry(parent_trace_id=parent.trace_id, grant_id="g1", span_id=""))
        # a row the call completes later (an approval it waits for) leaves with its completion only
        tracer.record(_entry(trace_id="1" * 32, policy="human_approval", status_code=202), export=False)
        tracer.update("1" * 32, status_code=200, approval_status="approved")
        await tracer.stop()

    asyncio.run(scenario())
    db.close()
    [(path, headers, body)] = collector.requests
    assert path == "/v1/traces" and headers["x-scope-orgid"] == "tenant-42"
    assert headers["content-type"] == "application/json"
    req = _parse(body)
    assert _attrs(req.resource_spans[0].resource)["service.name"] == "mesh-a"
    spans = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(spans) == 3
    assert spans[1]["parentSpanId"] == "00f067aa0ba902b7"  # lineage resolved to the parent's stored span
    approval = {a["key"]: a["value"] for a in spans[2]["attributes"]}
    assert approval["approval.status"] == {"stringValue": "approved"}


def test_otel_disabled_exports_nothing(tmp_path: Path, collector: Collector) -> None:
    settings = make_settings(tmp_path, otel_endpoint=collector.url, otel_disabled=True)
    db = Database(tmp_path / "flux7.db")
    try:
        assert Tracer(settings, db).exporter is None
    finally:
        db.close()


def test_a_file_endpoint_gets_one_json_export_per_call_and_stdout_goes_to_a_stream(tmp_path: Path) -> None:
    out = tmp_path / "otel" / "spans.jsonl"
    exp = OtlpExporter(str(out), protocol="http/protobuf")  # files are JSON lines whatever the protocol
    exp.export(spans_for(_mcp_call()))
    exp.export(spans_for(_entry(tool="fs.write")))
    lines = out.read_text().splitlines()
    assert [[s.name for s in _parse(x).resource_spans[0].scope_spans[0].spans] for x in lines] == [
        ["tools/call fs.read", "execute_tool fs.read"],
        ["tools/call fs.write"],
    ]
    stream = io.StringIO()
    OtlpExporter("stdout", stream=stream).export(spans_for(_entry()))
    decoded = msgspec.json.decode(stream.getvalue())
    assert decoded["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "tools/call fs.read"


def test_a_full_queue_drops_new_spans_instead_of_blocking() -> None:
    exp = OtlpExporter("http://127.0.0.1:9", queue_size=3)
    for _ in range(5):
        exp.export(spans_for(_entry()))
    assert exp.stats()["queued"] == 3 and exp.dropped == 2
    exp.export(spans_for(_mcp_call()))  # a call's two spans go together or not at all
    assert exp.stats()["queued"] == 3 and exp.dropped == 4


def test_otlp_json_of_no_spans_is_an_empty_export() -> None:
    assert _parse(otlp_json([])).resource_spans[0].scope_spans[0].spans == []


def test_a_control_plane_event_is_one_internal_span_named_by_the_event() -> None:
    [span] = spans_for(_entry(tool="mesh.halt", span_id="", latency_ms=0, agent_id="ops"))
    attrs = dict(span.attributes)
    assert (span.name, span.kind, span.status_code) == ("mesh.halt", 1, 1)
    assert attrs["agent.id"] == "ops" and "gen_ai.operation.name" not in attrs


def test_a_call_revised_after_an_approval_spans_from_its_arrival_not_its_first_record() -> None:
    """A blocking approval's row is first recorded when it is queued; its completion keeps that timestamp, so the
    span starts at `request.received_at` and lasts the whole latency, approval wait included."""
    entry = _entry(
        timestamp="2026-10-01T10:00:00.01Z",  # queued 10 ms after arrival
        latency_ms=5000,  # approved 4.9 s later, then forwarded
        revision=1,
        policy="human_approval",
        approval_status="approved",
        request=Ingress(transport="rest", status=200, received_at="2026-10-01T10:00:00Z"),
        upstream=Egress(name="spec.json", source="openapi", transport="tcp", start_ms=4990, ms=8),
    )
    server, client = spans_for(entry)
    arrival = 1_790_848_800 * 1_000_000_000
    assert (server.start, server.end) == (arrival, arrival + 5_000_000_000)
    assert (client.start, client.end) == (arrival + 4_990_000_000, arrival + 4_998_000_000)
