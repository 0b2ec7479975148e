"""Traces of governed calls: the entry, the SQLite store with its hash-chained JSONL, OTLP export, verify."""

from flux7.shared.tracing.chain import Verifier, verify_files
from flux7.shared.tracing.entry import (
    Egress,
    Ingress,
    SessionView,
    TraceEntry,
    TraceView,
    decode_entry,
    encode_entry,
    entry_to_wire,
    format_timestamp,
    parse_timestamp,
)
from flux7.shared.tracing.otlp import (
    OtlpExporter,
    Span,
    entries_to_otlp,
    otlp_json,
    otlp_protobuf,
    resource_attributes,
    spans_for,
)
from flux7.shared.tracing.tracer import Tracer

__all__ = [
    "Egress",
    "Ingress",
    "OtlpExporter",
    "SessionView",
    "Span",
    "TraceEntry",
    "TraceView",
    "Tracer",
    "Verifier",
    "decode_entry",
    "encode_entry",
    "entries_to_otlp",
    "entry_to_wire",
    "format_timestamp",
    "otlp_json",
    "otlp_protobuf",
    "parse_timestamp",
    "resource_attributes",
    "spans_for",
    "verify_files",
]
