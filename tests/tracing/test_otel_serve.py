"""OpenTelemetry from a real `flux7 serve` configured by the standard OTEL_* variables alone: what a collector
(a real HTTP server on loopback that records each body) receives after REST calls and calls from the official
MCP SDK client, decoded with opentelemetry-proto."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flux7.shared.mcp.messages import HANDSHAKE_VERSIONS, MODERN_VERSIONS
from flux7.shared.tracecontext import client_span_id
from flux7.shared.tracing import parse_timestamp
from tests.support.http import free_port
from tests.support.mesh import pets_mesh_config
from tests.support.server import running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

from .conftest import Collector

pytestmark = pytest.mark.served

REPO = Path(__file__).resolve().parents[2]
RICH = REPO / "tests" / "upstreams" / "servers" / "mcp_rich.py"
POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["list_pets", "get_*", "rich.*"]
    action: allow
  - tools: ["delete_pet"]
    action: deny
  - tools: ["create_pet"]
    action: human_approval
"""
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
SERVER, CLIENT = 2, 3


def _attrs(item: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in item.attributes}


def _config(tmp_path: Path, backend: Backend, *, trace_file: bool = False) -> Path:
    rich = f"mcp_servers:\n  - {{name: rich, transport: stdio, command: {sys.executable}, args: ['{RICH}']}}\n"
    return pets_mesh_config(tmp_path, backend, POLICY, admin_token=None, extra=rich, trace_file=trace_file)


def _rest(url: str, tool: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/tool/{tool}", json=body, headers={"Authorization": "Bearer agent:claude", **headers}, trust_env=False
    )


class Received:
    """Every span the collector got, by name, with the request that carried it."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def requests(self) -> list[ExportTraceServiceRequest]:
        return [ExportTraceServiceRequest.FromString(body) for _, _, body in self.collector.requests]

    def spans(self) -> list[Any]:
        return [s for r in self.requests() for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def count(self) -> int:
        return len(self.spans())


async def _mcp_calls(url: str, db: Path) -> list[str]:
    """Calls from the official SDK client, both eras; returns the MCP session ids open during the first."""
    http = httpx2.AsyncClient(headers={"Authorization": "Bearer agent:claude"}, timeout=30)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client:
        assert (await client.call_tool("rich.weather", {"city": "Oslo"})).is_error is False
        assert (await client.call_tool("rich.wipe", {"target": "/srv"})).is_error is True
        with sqlite3.connect(db) as conn:  # the client ends its session when it closes
            sessions = [row[0] for row in conn.execute("SELECT id FROM mcp_sessions")]
    http = httpx2.AsyncClient(headers={"Authorization": "Bearer agent:claude"}, timeout=30)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="auto") as client:
        assert (await client.call_tool("rich.plain", {"text": "x"})).is_error is False
    return sessions


async def test_otel_variables_alone_export_server_and_client_spans_as_protobuf(
    tmp_path: Path, backend: Backend, collector: Collector
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20otlp-secret",
        "OTEL_SERVICE_NAME": "mesh-under-test",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci,service.namespace=agents",
    }
    config = _config(tmp_path, backend)
    with running_server(config, env=env) as server:
        url = server.url
        wait_until(lambda: httpx.get(f"{url}/health", trust_env=False).json()["tools"] >= 3 + 6, what="the tools")
        traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
        assert _rest(url, "list_pets", {}, traceparent=traceparent).status_code == 200
        assert _rest(url, "delete_pet", {"petId": "1"}).status_code == 403
        assert _rest(url, "get_boom", {}).status_code == 502
        sessions = await _mcp_calls(url, tmp_path / "flux7.db")
        received = Received(collector)
        # 3 REST calls (2 forwarded) and 3 MCP calls (all forwarded): 6 SERVER and 5 CLIENT spans
        wait_until(lambda: received.count() >= 11, what="the spans at the collector")
        # a REST call held for a human approval: nothing leaves while it waits, both spans once it is done
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_rest, url, "create_pet", {"name": "Rex"})
            queued = wait_until(
                lambda: httpx.get(f"{url}/approvals", params={"status": "pending"}, trust_env=False).json(),
                what="the pending approval",
            )
            approve = httpx.post(
                f"{url}/approvals/{queued[0]['id']}/approve", json={"resolved_by": "ann"}, trust_env=False
            )
            assert approve.status_code == 200
            assert waiting.result(60).status_code == 200
        wait_until(lambda: received.count() >= 14, what="the approved call's spans")
    for path, headers, _ in collector.requests:
        assert path == "/v1/traces"
        assert headers["content-type"] == "application/x-protobuf"
        assert headers["authorization"] == "Bearer otlp-secret"
    [resource] = {tuple(sorted(_attrs(rs.resource).items())) for r in received.requests() for rs in r.resource_spans}
    res = dict(resource)
    assert res["service.name"] == "mesh-under-test" and res["service.version"] == "0.1.0"
    assert res["deployment.environment"] == "ci" and res["service.namespace"] == "agents"
    assert len(res["service.instance.id"]) == 36  # a UUID, the same for every export of the process

    everything = received.spans()  # all of them: the server drained its queue when it stopped
    # the approval's resolution is a control-plane event: one INTERNAL span
    assert [s.name for s in everything if s.kind == 1] == ["mesh.approval"]
    spans = [s for s in everything if s.kind != 1]
    assert len(spans) == 13
    by_id = {s.span_id: s for s in spans}
    servers = {s.name: s for s in spans if s.kind == SERVER}
    clients = {s.name: s for s in spans if s.kind == CLIENT}
    called = ("list_pets", "get_boom", "rich.weather", "rich.wipe", "rich.plain", "create_pet")
    assert sorted(servers) == sorted(f"tools/call {t}" for t in (*called, "delete_pet"))
    assert sorted(clients) == sorted(f"execute_tool {t}" for t in called)
    assert len({s.span_id for s in spans}) == 13  # every span once: the approval's row did not leave while pending
    for client in clients.values():
        parent = by_id[client.parent_span_id]
        assert parent.kind == SERVER and parent.name == "tools/call " + client.name.removeprefix("execute_tool ")
        assert parent.trace_id == client.trace_id
        assert parent.start_time_unix_nano <= client.start_time_unix_nano <= client.end_time_unix_nano
        assert client.end_time_unix_nano <= parent.end_time_unix_nano
        assert _attrs(client)["gen_ai.operation.name"] == "execute_tool"

    # REST, forwarded to the OpenAPI backend, under the caller's traceparent
    listed = servers["tools/call list_pets"]
    assert (listed.trace_id.hex(), listed.parent_span_id.hex()) == (CALLER_TRACE, CALLER_SPAN)
    a = _attrs(listed)
    assert a["http.response.status_code"] == 200 and a["flux7.transport"] == "rest" and "error.type" not in a
    assert "mcp.method.name" not in a and "http.status_code" not in a
    assert a["gen_ai.tool.name"] == "list_pets" and a["agent.id"] == "claude" and a["policy.action"] == "allow"
    c = _attrs(clients["execute_tool list_pets"])
    port = int(backend.url.rsplit(":", 1)[1])
    assert (c["server.address"], c["server.port"], c["network.transport"]) == ("127.0.0.1", port, "tcp")
    assert c["http.response.status_code"] == 200 and c["upstream.source"] == "openapi"
    # the backend was called with the CLIENT span as its parent
    seen = [r for r in backend.requests if r.path == "/pets"]
    sent = {k.lower(): v for k, v in seen[0].headers.items()}["traceparent"]
    expected = client_span_id(CALLER_TRACE, listed.span_id.hex())
    assert sent == f"00-{CALLER_TRACE}-{expected}-01" and clients["execute_tool list_pets"].span_id.hex() == expected

    denied = _attrs(servers["tools/call delete_pet"])
    assert (denied["error.type"], denied["http.response.status_code"]) == ("deny", 403)
    assert servers["tools/call delete_pet"].status.code == 2
    boom, boom_client = _attrs(servers["tools/call get_boom"]), _attrs(clients["execute_tool get_boom"])
    assert (boom["error.type"], boom["http.response.status_code"]) == ("500", 502)
    assert (boom_client["error.type"], boom_client["http.response.status_code"]) == ("500", 500)

    held, held_client = servers["tools/call create_pet"], clients["execute_tool create_pet"]
    h = _attrs(held)
    assert (h["approval.status"], h["approval.approved_by"], h["http.response.status_code"]) == ("approved", "ann", 200)
    assert h["policy.action"] == "human_approval" and "error.type" not in h
    # the SERVER span runs from arrival through the wait; the upstream call comes after the approval
    assert held_client.start_time_unix_nano - held.start_time_unix_nano >= h["approval.duration_ms"] * 1_000_000

    # MCP over Streamable HTTP (handshake era): session, protocol version and JSON-RPC id of the request
    weather = _attrs(servers["tools/call rich.weather"])
    assert weather["mcp.method.name"] == "tools/call" and weather["mcp.session.id"] in sessions
    assert weather["mcp.protocol.version"] in HANDSHAKE_VERSIONS
    assert weather["jsonrpc.request.id"].isdigit()
    assert (weather["network.transport"], weather["flux7.transport"]) == ("tcp", "mcp")
    assert "http.response.status_code" not in weather and "error.type" not in weather
    weather_client = _attrs(clients["execute_tool rich.weather"])
    assert weather_client["mcp.method.name"] == "tools/call" and weather_client["network.transport"] == "pipe"
    assert weather_client["upstream.name"] == "rich" and "server.address" not in weather_client
    wipe, wipe_client = _attrs(servers["tools/call rich.wipe"]), _attrs(clients["execute_tool rich.wipe"])
    assert wipe["error.type"] == wipe_client["error.type"] == "tool_error"  # isError: true from the upstream
    assert weather["jsonrpc.request.id"] != wipe["jsonrpc.request.id"]
    # the stateless era (the SDK's auto mode): the version from the request, no MCP session
    plain = _attrs(servers["tools/call rich.plain"])
    assert plain["mcp.protocol.version"] in MODERN_VERSIONS and "mcp.session.id" not in plain
    assert plain["jsonrpc.request.id"].isdigit()


def test_the_traces_endpoint_and_json_protocol_variables(
    tmp_path: Path, backend: Backend, collector: Collector
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # the traces variable wins over it
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{collector.url}/custom/traces",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
    }
    with running_server(_config(tmp_path, backend, trace_file=True), env=env) as server:
        assert _rest(server.url, "list_pets", {}).status_code == 200
        assert collector.wait_for(lambda: len(collector.requests) >= 1, timeout=30)
        # the mesh's own API still serves the entries, with the new optional fields, to the published client
        from mesh7 import AgentMesh

        [entry] = AgentMesh(server.url, agent="claude").traces()
    [(path, headers, body)] = collector.requests
    assert path == "/custom/traces" and headers["content-type"] == "application/json"
    from google.protobuf import json_format

    req = json_format.Parse(body, ExportTraceServiceRequest())
    spans = req.resource_spans[0].scope_spans[0].spans
    assert [(s.name, s.kind) for s in spans] == [("tools/call list_pets", SERVER), ("execute_tool list_pets", CLIENT)]
    assert _attrs(req.resource_spans[0].resource)["service.name"] == "flux7"
    assert entry["tool"] == "list_pets" and entry["request"]["transport"] == "rest"
    assert entry["request"]["status"] == 200 and parse_timestamp(entry["request"]["received_at"]) <= parse_timestamp(
        entry["timestamp"]
    )
    assert entry["upstream"]["source"] == "openapi" and entry["upstream"]["transport"] == "tcp"
    # the chained lines that carry them verify
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert any('"request":{' in line and '"upstream":{' in line for line in lines)
    verify = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "trace", "verify", str(tmp_path / "traces.jsonl")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


async def test_mesh7_mcp_over_stdio_exports_pipe_spans_with_the_negotiated_version(
    tmp_path: Path, backend: Backend, collector: Collector
) -> None:
    from tests.mcp_server.test_stdio import stdio_client

    config = _config(tmp_path, backend)
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    async with stdio_client(config, free_port(), "legacy", **otel) as client:
        assert (await client.call_tool("rich.weather", {"city": "Oslo"})).is_error is False
    received = Received(collector)
    # the exporter drains its queue when mesh7 --mcp stops at the end of stdin
    wait_until(lambda: received.count() >= 2, what="the stdio call's spans")
    server = next(s for s in received.spans() if s.kind == SERVER)
    a = _attrs(server)
    assert server.name == "tools/call rich.weather" and a["flux7.transport"] == "stdio"
    assert a["network.transport"] == "pipe" and a["mcp.protocol.version"] in HANDSHAKE_VERSIONS
    assert len(a["mcp.session.id"]) == 32 and a["jsonrpc.request.id"].isdigit()
    assert "network.protocol.name" not in a


def test_a_bad_otel_variable_stops_flux7_serve_with_a_clear_message(tmp_path: Path, backend: Backend) -> None:
    config = _config(tmp_path, backend)
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(config), "--port", str(free_port())],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        timeout=60,
    )
    assert done.returncode != 0
    assert "(environment): OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf or http/json, got 'grpc'" in done.stderr
