from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from litestar.testing import TestClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.tracing import TraceEntry

from .conftest import make_settings

ADMIN = {"Authorization": "Bearer admin-tok"}


@pytest.fixture
def mesh(tmp_path: Path) -> Mesh:
    settings = make_settings(tmp_path, auth={"admin_token": "admin-tok"}, memory={"enabled": False})
    return Mesh(settings)


@pytest.fixture
def client(mesh: Mesh) -> Iterator[TestClient[Any]]:
    with TestClient(create_app(mesh)) as c:
        yield c


def _seed(mesh: Mesh, **fields: Any) -> TraceEntry:
    base: dict[str, Any] = {
        "agent_id": "claude",
        "tool": "fs.read",
        "params": {"path": "/a"},
        "policy": "allow",
        "policy_rule": "p",
    }
    return mesh.tracer.record(TraceEntry(**{**base, **fields}))


def test_every_trace_route_is_control_plane(client: TestClient[Any]) -> None:
    for path in (
        "/traces",
        "/traces/verify",
        "/traces/x/why",
        "/otel-traces",
        "/sessions",
        "/sessions/s",
        "/metrics",
    ):
        r = client.get(path)
        assert r.status_code == 401, path
        assert r.json() == {"error": "control plane requires admin authorization"}


def test_traces_are_newest_first_with_exact_filters(client: TestClient[Any], mesh: Mesh) -> None:
    first = _seed(mesh)
    _seed(mesh, agent_id="scout7", tool="fs.write", policy="deny", error="denied")
    last = _seed(mesh, tool="fs.write")
    body = client.get("/traces", headers=ADMIN).json()
    assert [e["trace_id"] for e in body] == [last.trace_id, mesh.tracer.query()[1].trace_id, first.trace_id]
    assert body[2]["params"] == {"path": "/a"} and "session_id" not in body[2] and body[1]["error"] == "denied"
    assert [e["agent_id"] for e in client.get("/traces?agent=scout7", headers=ADMIN).json()] == ["scout7"]
    assert len(client.get("/traces?agent=scout&tool=fs.write", headers=ADMIN).json()) == 0
    assert len(client.get("/traces?agent=claude&tool=fs.write", headers=ADMIN).json()) == 1
    assert [e["trace_id"] for e in client.get(f"/traces?trace={first.trace_id}", headers=ADMIN).json()] == [
        first.trace_id
    ]


def test_traces_limit_defaults_to_100_and_is_capped_at_1000(client: TestClient[Any], mesh: Mesh) -> None:
    wanted = _seed(mesh, tool="memory.store")
    for _ in range(1050):
        _seed(mesh)
    assert len(client.get("/traces", headers=ADMIN).json()) == 100
    assert len(client.get("/traces?limit=500", headers=ADMIN).json()) == 500
    assert len(client.get("/traces?limit=5000", headers=ADMIN).json()) == 1000
    assert len(client.get("/traces?limit=nope", headers=ADMIN).json()) == 100
    found = client.get(f"/traces?trace={wanted.trace_id}", headers=ADMIN).json()
    assert [e["tool"] for e in found] == ["memory.store"]  # found past the last 1000 calls


def test_verify_reports_the_chain_and_a_break_is_still_200(client: TestClient[Any], mesh: Mesh, tmp_path: Path) -> None:
    for _ in range(3):
        _seed(mesh)
    report = client.get("/traces/verify", headers=ADMIN).json()
    path = tmp_path / "traces.jsonl"
    assert report["persistent"] is True and report["hmac"] is False and report["files"] == [str(path)]
    assert (report["lines"], report["chained"], report["unchained"]) == (3, 3, 0)
    assert (report["first_seq"], report["last_seq"], report["alg"]) == (1, 3, "sha256")
    assert report["verified_at"].endswith("Z") and "break" not in report and "anchor" not in report
    lines = path.read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"claude"', b'"mallory"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    r = client.get("/traces/verify", headers=ADMIN)
    assert r.status_code == 200
    assert r.json()["break"] == {
        "file": str(path),
        "line": 2,
        "seq": 2,
        "reason": "hash does not match the content",
    }


def test_why_walks_parent_traces_oldest_first(client: TestClient[Any], mesh: Mesh) -> None:
    root = _seed(mesh, policy="human_approval", approval_id="ap1")
    granted = _seed(mesh, parent_trace_id=root.trace_id, grant_id="g1", policy_rule="grant:g1")
    leaf = _seed(mesh, parent_trace_id=granted.trace_id, grant_id="g1")
    body = client.get(f"/traces/{leaf.trace_id}/why", headers=ADMIN).json()
    assert body["trace_id"] == leaf.trace_id and body["chain_length"] == 3
    assert [e["trace_id"] for e in body["chain"]] == [root.trace_id, granted.trace_id, leaf.trace_id]
    short = client.get(f"/traces/{leaf.trace_id}/why?depth=2", headers=ADMIN).json()
    assert [e["trace_id"] for e in short["chain"]] == [granted.trace_id, leaf.trace_id]
    r = client.get("/traces/nope/why", headers=ADMIN)
    assert r.status_code == 404 and r.json() == {"error": "trace not found"}


def test_sessions_summarise_by_last_seen_and_list_their_entries(client: TestClient[Any], mesh: Mesh) -> None:
    _seed(mesh, session_id="s1", agent_id="claude", timestamp="2026-10-01T10:00:00Z")
    _seed(mesh, session_id="s2", agent_id="scout7", timestamp="2026-10-01T10:00:01Z")
    _seed(mesh, session_id="s1", agent_id="other", tool="fs.write", timestamp="2026-10-01T10:00:02.5Z")
    _seed(mesh)  # no session: skipped
    body = client.get("/sessions", headers=ADMIN).json()
    assert [s["session_id"] for s in body] == ["s1", "s2"]
    assert body[0] == {
        "session_id": "s1",
        "agent_id": "claude",
        "event_count": 2,
        "first_seen": "2026-10-01T10:00:00Z",
        "last_seen": "2026-10-01T10:00:02.5Z",
        "tools": ["fs.read", "fs.write"],
    }
    assert len(client.get("/sessions?limit=1", headers=ADMIN).json()) == 1
    entries = client.get("/sessions/s1", headers=ADMIN).json()
    assert [e["tool"] for e in entries] == ["fs.write", "fs.read"]
    assert client.get("/sessions/unknown", headers=ADMIN).json() == []


def test_otel_traces_is_otlp_json(client: TestClient[Any], mesh: Mesh) -> None:
    _seed(mesh, estimated_input_tokens=5)
    _seed(mesh, agent_id="scout7")
    r = client.get("/otel-traces?agent=claude", headers=ADMIN)
    req = json_format.Parse(r.text, ExportTraceServiceRequest())
    spans = req.resource_spans[0].scope_spans[0].spans
    assert len(spans) == 1 and (spans[0].name, spans[0].kind) == ("tools/call fs.read", 2)  # SERVER
    assert len(json.loads(r.text)["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 1


def test_metrics_is_prometheus_text_shared_through_sqlite(client: TestClient[Any], mesh: Mesh) -> None:
    mesh.metrics.inc("mem7_writes_attempted_total")
    mesh.metrics.inc("calls_total", {"action": "deny"})
    r = client.get("/metrics", headers=ADMIN)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(r.text) for s in f.samples
    }
    assert samples[("agent_mesh_mem7_writes_attempted_total", ())] == 1
    assert samples[("agent_mesh_mem7_writes_succeeded_total", ())] == 0
    assert samples[("agent_mesh_calls_total", (("action", "deny"),))] == 1
    assert ("agent_mesh_approvals_pending", ()) in samples


def test_health_counts_come_from_the_trace_store(client: TestClient[Any], mesh: Mesh) -> None:
    _seed(mesh, estimated_input_tokens=7)
    _seed(mesh, policy="deny", error="no")
    entry = _seed(mesh, policy="human_approval")
    mesh.tracer.update(entry.trace_id, error="approval timed out", estimated_output_tokens=3)
    _seed(mesh, error="backend returned HTTP 500", status_code=502)  # a failed execution is an error
    traces = client.get("/health").json()["traces"]
    # refusals (deny, a timed-out approval) carry their reason in `error` but are not errors
    assert traces == {
        "total": 4,
        "allowed": 2,
        "denied": 1,
        "human_approval": 1,
        "errors": 1,
        "estimated_input_tokens": 7,
        "estimated_output_tokens": 3,
    }
