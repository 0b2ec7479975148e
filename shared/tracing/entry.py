"""The trace entry (CONTRACT 1.11): one governed tool call as the JSONL line and the HTTP API carry it."""

from __future__ import annotations

import functools
import re
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "Egress",
    "Ingress",
    "SessionView",
    "TraceEntry",
    "TraceView",
    "decode_entry",
    "encode_entry",
    "entry_to_wire",
    "format_timestamp",
    "normalise",
    "normalised",
    "parse_timestamp",
]


class Ingress(msgspec.Struct, kw_only=True, omit_defaults=True):
    """How the call came in (the OpenTelemetry SERVER span): written as `request`, each field left out when empty.
    Not in the reference's contract: readers that do not know it ignore it, and the chain hashes it as written."""

    transport: str = ""  # rest | decide | mcp | stdio
    mcp_session_id: str = ""  # the MCP session (Mcp-Session-Id, or the stdio session)
    mcp_protocol_version: str = ""
    jsonrpc_id: str = ""  # the tools/call request's JSON-RPC id, as text
    status: int = 0  # what the gateway answered over HTTP (rest, decide)
    received_at: str = ""  # RFC3339Nano UTC: when the call arrived (`timestamp` is when it was first recorded)


class Egress(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The upstream call, when the call was forwarded (the OpenTelemetry CLIENT span): written as `upstream`."""

    name: str = ""  # the MCP server's or CLI tool's name, the OpenAPI source's url or file
    source: str = ""  # mcp | openapi | cli
    address: str = ""  # host of an HTTP upstream
    port: int = 0
    transport: str = ""  # tcp | pipe (stdio MCP server)
    start_ms: float = 0.0  # when it started, since the call started
    ms: float = 0.0  # how long it took
    error_type: str = ""  # timeout | tool_error | an HTTP status | a JSON-RPC code | nonzero_exit | an exception


class TraceEntry(msgspec.Struct, kw_only=True):
    """Field order is the wire order. Zero values of the `?` fields are dropped on the wire (Go omitempty);
    `params` is always written, `null` when absent."""

    trace_id: str = ""
    session_id: str = ""
    agent_id: str = ""
    user_id: str = ""
    tool: str = ""
    params: Any = None
    policy: str = ""  # allow | deny | human_approval | rate_limited | halted
    policy_rule: str = ""
    status_code: int = 0
    latency_ms: int = 0
    error: str = ""
    timestamp: str = ""  # RFC3339Nano, UTC
    exit_code: int | None = None  # a pointer in Go: 0 is kept, only "absent" is dropped
    grant_id: str = ""
    parent_trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    approval_id: str = ""
    approval_status: str = ""  # approved | denied | timeout
    approved_by: str = ""
    approval_ms: int = 0
    supervisor_reasoning: str = ""
    supervisor_confidence: float = 0.0
    estimated_input_tokens: int = 0
    estimated_output_tokens: int = 0
    tokens_source: str = ""  # real | estimate
    revision: int = 0
    request: Ingress | None = None
    upstream: Egress | None = None


class TraceView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A trace entry as the wire carries it (CONTRACT 1.11): the trace file's line before its chain fields, and the
    entries the HTTP routes answer. TraceEntry's fields in its order; the ones the contract always writes have no
    default, the others are left out when zero (Go's omitempty: `exit_code` only when absent, `request` and
    `upstream` when they hold nothing). Built by `entry_to_wire` only: msgspec leaves a field out when its value *is*
    the default, so a zero float (`supervisor_confidence`) is UNSET there rather than 0.0."""

    trace_id: str
    session_id: str = ""
    agent_id: str
    user_id: str = ""
    tool: str
    params: Any
    policy: str
    policy_rule: str
    status_code: int
    latency_ms: int
    error: str = ""
    timestamp: str
    exit_code: int | None = None
    grant_id: str = ""
    parent_trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    approval_id: str = ""
    approval_status: str = ""
    approved_by: str = ""
    approval_ms: int = 0
    supervisor_reasoning: str = ""
    supervisor_confidence: float | UnsetType = UNSET
    estimated_input_tokens: int = 0
    estimated_output_tokens: int = 0
    tokens_source: str = ""
    revision: int = 0
    request: Ingress | None = None
    upstream: Egress | None = None


class SessionView(msgspec.Struct, kw_only=True):
    """A GET /sessions entry (CONTRACT 1.6): a session's first agent, its calls and the tools they used."""

    session_id: str
    agent_id: str  # the first seen
    event_count: int
    first_seen: str  # RFC3339Nano
    last_seen: str
    tools: list[str]  # each once


_INTS = (
    "status_code",
    "latency_ms",
    "approval_ms",
    "estimated_input_tokens",
    "estimated_output_tokens",
    "revision",
)


def entry_to_wire(entry: TraceEntry) -> TraceView:
    """The entry as the wire carries it."""
    # msgspec's asdict keeps the field order and costs a fraction of one getattr per field.
    out = msgspec.structs.asdict(entry)
    if not out["supervisor_confidence"]:
        out["supervisor_confidence"] = UNSET
    request, upstream = out["request"], out["upstream"]
    if request is not None and not msgspec.to_builtins(request):  # an all-empty object is left out like any zero
        out["request"] = None
    if upstream is not None and not msgspec.to_builtins(upstream):
        out["upstream"] = None
    return TraceView(**out)


def normalise(entry: TraceEntry) -> TraceEntry:
    """Coerce numbers to the wire types (callers may hand float milliseconds) and fill id and time."""
    return normalised(entry)[0]


def normalised(entry: TraceEntry) -> tuple[TraceEntry, int]:
    """`normalise`, and the entry's time in nanoseconds since the epoch (what the store indexes)."""
    changes: dict[str, Any] = {}
    for name in _INTS:
        value = getattr(entry, name)
        if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
            changes[name] = round(float(value or 0))
    if entry.exit_code is not None and not isinstance(entry.exit_code, int):
        changes["exit_code"] = int(entry.exit_code)
    if not isinstance(entry.supervisor_confidence, float):
        changes["supervisor_confidence"] = float(entry.supervisor_confidence or 0)
    if not entry.trace_id:
        changes["trace_id"] = secrets.token_hex(16)
    text = entry.timestamp
    ns = _canonical_ns(text) if text else None  # the usual case: written by format_timestamp, kept as it is
    if ns is None:
        parsed = parse_timestamp(text) if text else None
        if parsed is None:  # absent or not RFC 3339: the time of recording
            ns = time.time_ns()
            changes["timestamp"] = format_timestamp(ns)
        else:
            ns = parsed
            if (canonical := format_timestamp(ns)) != text:
                changes["timestamp"] = canonical  # Go's RFC3339Nano in UTC, whatever offset or precision came in
    return (msgspec.structs.replace(entry, **changes) if changes else entry), ns


_encoder = msgspec.json.Encoder()


def encode_entry(entry: TraceEntry) -> bytes:
    """Compact JSON of the entry. Params that cannot be encoded are kept as their repr, never lost."""
    wire = entry_to_wire(entry)
    try:
        return _encoder.encode(wire)
    except (TypeError, ValueError, UnicodeEncodeError, msgspec.EncodeError):
        wire.params = {"_unencodable": repr(entry.params)}
        return _encoder.encode(wire)


_decoder = msgspec.json.Decoder(TraceEntry)


def decode_entry(data: bytes | str) -> TraceEntry:
    """Decode an entry (or a whole chained line: the envelope keys are ignored)."""
    return _decoder.decode(data)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9})\d*)?([Zz]|[+-]\d{2}:\d{2})$")


def format_timestamp(ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: nanoseconds with trailing zeros trimmed, no fraction when zero."""
    seconds, frac = divmod(ns, 1_000_000_000)
    base = _second(seconds)
    if frac:
        return f"{base}.{frac:09d}".rstrip("0") + "Z"
    return base + "Z"


@functools.lru_cache(maxsize=256)
def _second(seconds: int) -> str:
    # Every trace line formats (and parses) timestamps of the same few seconds: worked out once per second.
    return (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


@functools.lru_cache(maxsize=256)
def _epoch_seconds(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int | None:
    try:
        dt = datetime(year, month, day, hour, minute, min(second, 59), tzinfo=UTC)
    except ValueError:
        return None
    return (dt - _EPOCH) // timedelta(seconds=1)


@functools.lru_cache(maxsize=256)
def _canonical_second(text: str) -> int | None:
    # "YYYY-MM-DDTHH:MM:SS" as format_timestamp writes it: its epoch seconds; None for any other text.
    m = _RFC3339.match(text + "Z")
    if not m or m.group(7) is not None:
        return None
    seconds = _epoch_seconds(*(int(m.group(i)) for i in range(1, 7)))
    if seconds is None or _second(seconds) != text:
        return None
    return seconds


def _canonical_ns(text: str) -> int | None:
    """Nanoseconds of a timestamp already in format_timestamp's form (UTC, `Z`, a fraction without trailing
    zeros), None for anything else (which parse_timestamp then reads and format_timestamp rewrites). The
    seconds part is looked up once per second: every line of a second shares it."""
    n = len(text)
    if n < 20 or text[-1] != "Z":
        return None
    seconds = _canonical_second(text[:19])
    if seconds is None:
        return None
    if n == 20:
        return seconds * 1_000_000_000
    frac = text[20:-1]
    if text[19] != "." or not 1 <= len(frac) <= 9 or not frac.isdigit() or not frac.isascii() or frac[-1] == "0":
        return None
    return seconds * 1_000_000_000 + int(frac.ljust(9, "0"))


def parse_timestamp(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC3339 timestamp (any offset), or None when it is not one."""
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    whole = _epoch_seconds(*(int(m.group(i)) for i in range(1, 7)))
    if whole is None:
        return None
    tz = m.group(8)
    offset = 0
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        offset = sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    frac = int((m.group(7) or "0").ljust(9, "0"))
    return (whole - offset) * 1_000_000_000 + frac
