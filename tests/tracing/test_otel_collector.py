"""flux7's OTLP/HTTP export through a real OpenTelemetry collector: Rotel (a collector for OTLP, shipped as a
binary in the `rotel` package on PyPI) receives our protobuf and JSON exports, decodes them, and exports the spans
again as OTLP/HTTP protobuf to a loopback stand-in that records them. What comes out the far side is decoded with
opentelemetry-proto: a collector that refused or garbled a field would show here.

The official OpenTelemetry Collector (otelcol) cannot be installed from the registries this project uses: Debian
ships only the Go SDK's source, npm only exporters, and PyPI's one repackaging of otelcol-contrib is built
without the OTLP receiver."""

from __future__ import annotations

import asyncio
import gzip
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rotel
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flux7.shared.tracing import Egress, Ingress, OtlpExporter, TraceEntry, resource_attributes, spans_for
from flux7.shared.tracing.otlp import JSON, PROTOBUF
from tests.support.http import free_port
from tests.support.waiting import wait_until

from .conftest import Collector

pytestmark = pytest.mark.served

AGENT = Path(rotel.__file__).parent / "rotel-agent"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _attrs(item: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in item.attributes}


def _body(headers: dict[str, str], body: bytes) -> bytes:
    assert headers["content-type"] == "application/x-protobuf"
    return gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def rotel_collector(tmp_path: Path, collector: Collector) -> Iterator[str]:
    """Rotel receiving OTLP/HTTP on a loopback port and exporting to the recording stand-in; yields its URL."""
    port = free_port()
    log = (tmp_path / "rotel.log").open("wb")
    proc = subprocess.Popen(
        [
            str(AGENT),
            "start",
            *("--otlp-http-endpoint", f"127.0.0.1:{port}"),
            *("--otlp-grpc-endpoint", f"127.0.0.1:{free_port()}"),
            *("--exporter", "otlp"),
            *("--otlp-exporter-endpoint", collector.url),
            *("--otlp-exporter-protocol", "http"),
            *("--batch-timeout", "100ms"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith(("ROTEL_", "OTEL_"))},
    )
    try:
        wait_until(lambda: proc.poll() is not None or _listening(port), what="rotel's OTLP/HTTP receiver")
        assert proc.poll() is None, (tmp_path / "rotel.log").read_text()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _call(tool: str, **fields: Any) -> TraceEntry:
    base: dict[str, Any] = {
        "trace_id": TRACE,
        "span_id": f"{len(tool):016x}",
        "agent_id": "claude",
        "tool": tool,
        "policy": "allow",
        "policy_rule": "p",
        "status_code": 200,
        "latency_ms": 40,
        "timestamp": "2026-10-01T10:00:00.5Z",
    }
    return TraceEntry(**{**base, **fields})


@pytest.mark.parametrize("protocol", [PROTOBUF, JSON])
def test_a_real_collector_accepts_and_passes_on_our_spans(
    rotel_collector: str, collector: Collector, protocol: str
) -> None:
    entry = _call(
        "fs.read",
        request=Ingress(transport="mcp", mcp_session_id="sess-1", mcp_protocol_version="2025-06-18", jsonrpc_id="4"),
        upstream=Egress(name="fs", source="mcp", transport="pipe", start_ms=5, ms=20, error_type="tool_error"),
        error="the tool failed",
    )
    denied = _call("fs.write", policy="deny", error="no writes", request=Ingress(transport="rest", status=403))
    resource = resource_attributes("mesh-through-rotel", {"deployment.environment": "ci"})

    async def send() -> OtlpExporter:
        exp = OtlpExporter(rotel_collector, protocol=protocol, resource=resource, flush_interval=60)
        await exp.start()
        exp.export(spans_for(entry))
        exp.export(spans_for(denied))
        await exp.stop()
        return exp

    exp = asyncio.run(send())
    assert (exp.sent, exp.failed) == (3, 0)  # the collector answered 2xx to our export
    received: list[Any] = []

    def arrived() -> bool:
        received[:] = [
            (rs, s)
            for _, headers, body in collector.requests
            for rs in ExportTraceServiceRequest.FromString(_body(headers, body)).resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]
        return len(received) >= 3

    wait_until(arrived, timeout=30, what="the spans out of the collector")
    spans = {s.name: s for _, s in received}
    assert sorted(spans) == ["execute_tool fs.read", "tools/call fs.read", "tools/call fs.write"]
    res = _attrs(received[0][0].resource)
    assert res["service.name"] == "mesh-through-rotel" and res["deployment.environment"] == "ci"
    assert res["service.instance.id"] == resource["service.instance.id"]
    server, client = spans["tools/call fs.read"], spans["execute_tool fs.read"]
    assert (server.kind, client.kind, spans["tools/call fs.write"].kind) == (2, 3, 2)
    assert server.trace_id.hex() == TRACE and client.parent_span_id == server.span_id
    assert client.start_time_unix_nano - server.start_time_unix_nano == 5_000_000
    a = _attrs(server)
    assert (a["mcp.method.name"], a["mcp.session.id"], a["jsonrpc.request.id"]) == ("tools/call", "sess-1", "4")
    assert a["error.type"] == "tool_error" and server.status.code == 2
    assert server.status.message == "the tool failed"
    d = _attrs(spans["tools/call fs.write"])
    assert (d["error.type"], d["http.response.status_code"]) == ("deny", 403)
