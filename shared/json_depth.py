"""A nesting limit for every JSON body the mesh accepts (REST, /decide, /mcp, /rpc, both stdio servers).

msgspec recurses once per nested array or object, so a body of 100,000 `[` raises RecursionError (a 500), and
values nested a few hundred deep would still overflow later code (policy conditions, canonical digests, trace
encoding). `check_depth` scans the raw bytes before any decoder sees them: a count of `[` and `{` settles
almost every body in C time; only a body with more brackets than the limit is scanned properly (strings
removed, then a running depth)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from flux7.shared.errors import TooDeep

__all__ = ["MAX_JSON_DEPTH", "check_depth", "decode", "too_deep"]

# Arrays and objects nested inside each other, the outermost counting as 1. Deep enough for any tool's
# arguments or JSON-RPC envelope; far below the ~1,000 where Python's recursion limit is reached.
MAX_JSON_DEPTH = 128

# A JSON string, escapes included (the unrolled form, linear in the string's length).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
# `[` and `{` become +1, `]` and `}` become -1 (0xFF read as int8)
_STEPS = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")


def too_deep(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text nests arrays/objects deeper than `limit`. Invalid JSON is the decoder's to
    reject; this only answers whether decoding it could go too deep."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # fewer openings than the limit: nothing can nest deeper
    structural = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if structural.count(b"[") + structural.count(b"{") <= limit:
        return False
    import numpy as np  # only bodies with more brackets than the limit get here

    steps = np.frombuffer(structural.translate(_STEPS), dtype=np.int8)
    return bool(int(np.cumsum(steps, dtype=np.int64).max()) > limit)


def check_depth(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise TooDeep when the text nests deeper than `limit`."""
    if too_deep(raw, limit):
        raise TooDeep(f"invalid JSON body: nested deeper than {limit} levels")


def decode(raw: bytes | str, *, type: Any = Any) -> Any:
    """msgspec.json.decode behind the nesting limit: TooDeep, msgspec.DecodeError or msgspec.ValidationError."""
    check_depth(raw)
    return msgspec.json.decode(raw, type=type)
