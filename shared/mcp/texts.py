"""The texts an agent reads in `tools/call` results (CONTRACT 1.14), matched byte for byte."""

from __future__ import annotations

import math
from typing import Any

import msgspec

__all__ = [
    "approval_denied",
    "approval_required",
    "approval_timed_out",
    "backend_error",
    "go_indent",
    "policy_denied",
    "rate_limited",
    "text_result",
]


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    return result


def _go_numbers(value: Any) -> Any:
    """Go decodes JSON numbers to float64 and prints integral ones without a fraction (`1`, not `1.0`)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_numbers(v) for v in value]
    return value


_HTML_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def go_indent(value: Any) -> str:
    """`json.MarshalIndent(v, "", "  ")` as the reference writes it: sorted map keys, two-space indent, and
    Go's HTML-safe escapes (those characters only ever occur inside JSON strings, so replacing them is exact)."""
    try:
        compact = msgspec.json.encode(_go_numbers(value), order="sorted")
    except (TypeError, msgspec.EncodeError):
        compact = msgspec.json.encode(str(value))
    text = msgspec.json.format(compact, indent=2).decode()
    for raw, escaped in _HTML_ESCAPES:
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def policy_denied(reason: str) -> str:
    return f"Policy denied: {reason}"


def backend_error(error: str) -> str:
    return f"Backend error: {error}"


def rate_limited(error: str) -> str:
    return f"Rate limited: {error}"


def approval_required(approval_id: str, tool: str, valid_seconds: int) -> str:
    short = approval_id[:8]
    return (
        f"Approval required (id: {short}) for {tool}, valid {valid_seconds}s.\n"
        f"A human must approve this call before it runs. Ways to approve it:\n"
        f"  - mesh approve {short}\n"
        f"  - the console's Approvals page\n"
        f"  - POST /approvals/{approval_id}/approve\n"
        f"Once it is approved, call {tool} again with the same arguments."
    )


def approval_denied(who: str, tool: str, approval_id: str, reason: str = "") -> str:
    why = " ".join(reason.split())
    said = f" Reason: {why}." if why else ""
    return f"Approval denied by {who} for {tool} (id: {approval_id[:8]}): do not retry this call.{said}"


def approval_timed_out(tool: str, approval_id: str) -> str:
    return f"Approval timed out for {tool} (id: {approval_id[:8]}): nobody approved it in time."
