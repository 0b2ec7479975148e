"""Intents and outcomes in the store: an outcome revises its own call (even when another call shares the trace
id), and the calls left without one are reported alike by /traces/verify's store query and the file walk."""

from __future__ import annotations

import io
import json
from pathlib import Path

from flux7.shared.tracing import TraceEntry, Tracer
from flux7.shared.tracing.verify_cli import main as verify_main


def _intent(span: str) -> TraceEntry:
    return TraceEntry(trace_id="t" * 32, span_id=span, agent_id="a", tool="fs.write", policy="allow", status_code=0)


def test_an_outcome_revises_its_own_call_when_two_calls_share_a_trace_id(tmp_path: Path, tracer: Tracer) -> None:
    first = tracer.begin(_intent("1" * 16))
    second = tracer.begin(_intent("2" * 16))
    assert second != first
    tracer.revise(first, {"status_code": 200, "latency_ms": 5})

    calls = {e.span_id: e for e in tracer.query(trace="t" * 32)}
    assert (calls["1" * 16].status_code, calls["1" * 16].revision) == (200, 1)
    assert (calls["2" * 16].status_code, calls["2" * 16].revision) == (0, 0)

    report = tracer.verify()
    assert "break" not in report and report["chained"] == 3
    assert report["outcome_unknown"] == 1
    assert report["outcome_unknown_calls"][0]["seq"] == 2  # the second call's intent line

    out, err = io.StringIO(), io.StringIO()
    assert verify_main(["--json", str(tmp_path / "traces.jsonl")], env={}, out=out, err=err) == 0
    walked = json.loads(out.getvalue())
    assert walked["outcome_unknown"] == 1 and walked["outcome_unknown_calls"][0]["seq"] == 2


def test_counts_take_the_outcome_of_an_intent_once(tracer: Tracer) -> None:
    row = tracer.begin(_intent("3" * 16))
    assert tracer.counts()["total"] == 1 and tracer.counts()["errors"] == 0
    tracer.revise(row, {"status_code": 502, "error": "backend returned HTTP 500"})
    counts = tracer.counts()
    assert (counts["total"], counts["allowed"], counts["errors"]) == (1, 1, 1)
    assert "outcome_unknown" not in tracer.verify()
