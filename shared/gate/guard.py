"""What a reviewer is shown of a call's arguments (CONTRACT 1.8): the injection tripwire and content
redaction."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from flux7.shared.gofmt import go_v

__all__ = ["INJECTION_PATTERNS", "detect_content_type", "injection_risk", "redact"]

INJECTION_PATTERNS = (
    r"ignore (all )?previous instructions",
    r"you are now",
    r"system prompt:",
    r"override (the )?policy",
    r"pre-?approved",
    r"do not deny",
    r"do not escalate",
    r"must (be )?approv",
    r"pretend (you are|to be)",
    r"act as (a |an )?",
    r"IMPORTANT: (this|override|approve|ignore)",
    r"confidence should be",
)
_INJECTION = re.compile("|".join(f"(?:{p})" for p in INJECTION_PATTERNS), re.IGNORECASE)

_CONTENT_KEYS = frozenset({"content", "body", "data", "file_content", "text"})
_LONG = 256


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            _leaves(value[key], out)
    elif isinstance(value, list | tuple):
        for item in value:
            _leaves(item, out)
    elif isinstance(value, str):
        out.append(value)
    elif value is not None:
        out.append(go_v(value))


def injection_risk(params: Any) -> bool:
    """True when any text in the (unredacted) arguments reads like an attempt to steer the reviewer."""
    parts: list[str] = []
    _leaves(params, parts)
    return _INJECTION.search(" ".join(parts)) is not None


def detect_content_type(data: bytes) -> str:
    head = data.lstrip()
    if head[:1] in (b"{", b"["):
        try:
            json.loads(data)
            return "application/json"
        except ValueError:
            pass
    lowered = head[:32].lower()
    if lowered.startswith(b"<!doctype html") or lowered.startswith(b"<html"):
        return "text/html"
    if head[:1] == b"<":
        return "text/xml"
    if any((b < 0x20 and b not in (0x09, 0x0A, 0x0D)) or b == 0x7F for b in data[:512]):
        return "application/octet-stream"
    return "text/plain"


def _summary(text: str) -> dict[str, Any]:
    data = text.encode("utf-8", "surrogatepass")
    return {
        "content_length": len(data),
        "content_sha256": hashlib.sha256(data).hexdigest(),
        "content_type_detected": detect_content_type(data),
    }


def redact(params: Any) -> Any:
    """Replace content-bearing strings of a map (by key name, or length >= 256 bytes) with a summary.
    Nested maps are processed; lists are left as they are, as the reference does."""
    if not isinstance(params, dict):
        return params
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, str) and (
            str(key).lower() in _CONTENT_KEYS or len(value.encode("utf-8", "surrogatepass")) >= _LONG
        ):
            out[key] = _summary(value)
        elif isinstance(value, dict):
            out[key] = redact(value)
        else:
            out[key] = value
    return out
