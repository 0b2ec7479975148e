"""Traces of governed calls: the entry, the SQLite store with its hash-chained JSONL, OTLP export, verify."""

from .chain import Verifier, verify_files
from .entry import TraceEntry, decode_entry, encode_entry, entry_to_wire, format_timestamp, parse_timestamp
from .otlp import OtlpExporter, entries_to_otlp, entry_to_span
from .tracer import Tracer

__all__ = [
    "OtlpExporter",
    "TraceEntry",
    "Tracer",
    "Verifier",
    "decode_entry",
    "encode_entry",
    "entries_to_otlp",
    "entry_to_span",
    "entry_to_wire",
    "format_timestamp",
    "parse_timestamp",
    "verify_files",
]
