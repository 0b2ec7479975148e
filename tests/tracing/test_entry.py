from __future__ import annotations

import json
import random
from typing import Any

import msgspec

from flux7.shared.tracing import (
    Egress,
    Ingress,
    TraceEntry,
    encode_entry,
    entry_to_wire,
    format_timestamp,
    parse_timestamp,
)
from flux7.shared.tracing.entry import decode_entry, normalise


def _wire(entry: TraceEntry) -> dict[str, Any]:
    wire: dict[str, Any] = msgspec.to_builtins(entry_to_wire(entry))
    return wire


def test_zero_optional_fields_are_dropped_and_required_ones_kept() -> None:
    wire = json.loads(
        encode_entry(TraceEntry(trace_id="t1", agent_id="a", tool="x", policy="deny", timestamp="2026-10-01T10:00:00Z"))
    )
    assert list(wire) == [
        "trace_id",
        "agent_id",
        "tool",
        "params",
        "policy",
        "policy_rule",
        "status_code",
        "latency_ms",
        "timestamp",
    ]
    assert wire["params"] is None
    assert wire["status_code"] == 0 and wire["latency_ms"] == 0 and wire["policy_rule"] == ""


def test_set_optional_fields_appear_in_contract_order() -> None:
    entry = TraceEntry(
        trace_id="t",
        session_id="s",
        agent_id="a",
        user_id="u",
        tool="x",
        params={"k": 1},
        policy="human_approval",
        policy_rule="r",
        status_code=200,
        latency_ms=5,
        error="e",
        timestamp="2026-10-01T10:00:00Z",
        exit_code=0,
        grant_id="g",
        parent_trace_id="p",
        span_id="s1",
        parent_span_id="s0",
        approval_id="ap",
        approval_status="approved",
        approved_by="me",
        approval_ms=9,
        supervisor_reasoning="ok",
        supervisor_confidence=0.9,
        estimated_input_tokens=3,
        estimated_output_tokens=4,
        tokens_source="estimate",
        revision=2,
        request=Ingress(transport="mcp", jsonrpc_id="7"),
        upstream=Egress(name="fs", source="mcp", transport="pipe", start_ms=0.5, ms=12.25),
    )
    wire = msgspec.to_builtins(entry_to_wire(entry))
    assert list(wire) == list(TraceEntry.__struct_fields__)
    assert wire["exit_code"] == 0  # a pointer in Go: zero is a value, only absence is dropped
    assert decode_entry(encode_entry(entry)) == entry


def test_float_milliseconds_become_integers_and_id_and_time_are_filled() -> None:
    entry = normalise(TraceEntry(agent_id="a", tool="x", policy="allow", latency_ms=12.6))  # type: ignore[arg-type]
    assert entry.latency_ms == 13 and isinstance(entry.latency_ms, int)
    assert len(entry.trace_id) == 32 and int(entry.trace_id, 16) >= 0
    assert parse_timestamp(entry.timestamp) is not None


def test_timestamps_are_stored_in_go_form_in_utc() -> None:
    def stamp(text: str) -> str:
        return normalise(TraceEntry(timestamp=text)).timestamp

    assert stamp("2026-10-01T10:00:00.120000Z") == "2026-10-01T10:00:00.12Z"
    assert stamp("2026-10-01T12:00:00+02:00") == "2026-10-01T10:00:00Z"
    assert stamp("2026-10-01T10:00:00.000000001Z") == "2026-10-01T10:00:00.000000001Z"
    assert parse_timestamp(stamp("not a time")) is not None


def test_timestamps_are_go_rfc3339nano_in_utc() -> None:
    assert format_timestamp(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert format_timestamp(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert format_timestamp(1_700_000_000_000_000_001) == "2023-11-14T22:13:20.000000001Z"
    ns = 1_700_000_000_123_456_789
    assert parse_timestamp(format_timestamp(ns)) == ns
    assert parse_timestamp("2023-11-14T23:13:20.5+01:00") == 1_700_000_000_500_000_000
    assert parse_timestamp("yesterday") is None


def test_request_and_upstream_are_optional_objects_without_their_empty_fields() -> None:
    """Lines written before they existed decode unchanged; new lines leave out what is empty, so readers of the
    contract's fields see nothing new unless the call had it."""
    bare = TraceEntry(trace_id="t", agent_id="a", tool="x", timestamp="2026-10-01T10:00:00Z")
    assert "request" not in _wire(bare) and "upstream" not in _wire(bare)
    empty = TraceEntry(trace_id="t", agent_id="a", tool="x", request=Ingress(), upstream=Egress())
    assert "request" not in _wire(empty) and "upstream" not in _wire(empty)
    full = TraceEntry(
        trace_id="t",
        agent_id="a",
        tool="x",
        timestamp="2026-10-01T10:00:00Z",
        revision=1,
        request=Ingress(transport="rest", status=502),
        upstream=Egress(name="spec.json", source="openapi", address="127.0.0.1", port=8080, transport="tcp", ms=3.5),
    )
    wire = json.loads(encode_entry(full))
    assert list(wire)[-3:] == ["revision", "request", "upstream"]  # after every contract field
    assert wire["request"] == {"transport": "rest", "status": 502}
    assert wire["upstream"] == {
        "name": "spec.json",
        "source": "openapi",
        "address": "127.0.0.1",
        "port": 8080,
        "transport": "tcp",
        "ms": 3.5,
    }
    assert decode_entry(encode_entry(full)) == full
    old = decode_entry(b'{"trace_id":"t","agent_id":"a","tool":"x","params":null,"policy":"allow"}')
    assert old.request is None and old.upstream is None


def _plain_wire(entry: TraceEntry) -> dict[str, object]:
    """The wire object as it was first written, field by field: what the chain's bytes were hashed over."""
    always = {"trace_id", "agent_id", "tool", "params", "policy", "policy_rule", "status_code", "latency_ms"}
    always.add("timestamp")
    out: dict[str, object] = {}
    for name in TraceEntry.__struct_fields__:
        value = getattr(entry, name)
        if name in always:
            out[name] = value
        elif name == "exit_code":
            if value is not None:
                out[name] = value
        elif name in ("request", "upstream"):
            nested = msgspec.to_builtins(value) if value is not None else None
            if nested:
                out[name] = nested
        elif value:
            out[name] = value
    return out


def test_encoded_entries_are_byte_for_byte_what_the_plain_field_walk_writes() -> None:
    # The trace file's lines are hashed as written and `flux7 verify` of older releases reads them: the faster
    # encoding must keep every byte (key order, omitted zeros, a kept exit code 0, empty nested objects left out).
    rng = random.Random(19)
    texts = ["", "x", "é ü", 'quo"te', "a\nb"]
    for _ in range(400):
        fields: dict[str, object] = {}
        for name in TraceEntry.__struct_fields__:
            if rng.random() < 0.5:
                continue
            if name in ("status_code", "latency_ms", "approval_ms", "revision", "estimated_input_tokens"):
                fields[name] = rng.choice([0, 1, 200, 2**40])
            elif name == "estimated_output_tokens":
                fields[name] = rng.choice([0, 7])
            elif name == "exit_code":
                fields[name] = rng.choice([None, 0, 3])
            elif name == "supervisor_confidence":
                fields[name] = rng.choice([0.0, 0.5, float(0)])
            elif name == "params":
                fields[name] = rng.choice([None, {}, {"k": [1, "v"]}, [], "s", 0])
            elif name == "request":
                fields[name] = rng.choice([None, Ingress(), Ingress(transport="rest", status=200), Ingress(status=0)])
            elif name == "upstream":
                fields[name] = rng.choice([None, Egress(), Egress(name="n", source="openapi", start_ms=0.5, ms=1.0)])
            else:
                fields[name] = rng.choice(texts)
        entry = TraceEntry(**fields)  # type: ignore[arg-type]
        assert _wire(entry) == _plain_wire(entry)
        assert list(_wire(entry)) == list(_plain_wire(entry))
        assert encode_entry(entry) == msgspec.json.encode(_plain_wire(entry))
