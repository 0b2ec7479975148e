"""What a trace records about an upstream call (`upstream` in the entry, the OpenTelemetry CLIENT span)."""

from __future__ import annotations

import re
from typing import Any

from flux7.shared.tracing.entry import Egress
from flux7.shared.upstreams.base import ToolDef, UpstreamResult

__all__ = ["egress", "error_type"]

_MCP_ERROR = re.compile(r"^MCP error (-?\d+):")


def error_type(tool: ToolDef, result: UpstreamResult) -> str:
    """error.type of an upstream call, low-cardinality: `timeout`, `tool_error` (an MCP result with isError),
    the JSON-RPC error code, `nonzero_exit`, the HTTP status, or `_OTHER`; "" when it succeeded."""
    if result.timed_out:
        return "timeout"
    if not result.error:
        is_error = isinstance(result.result, dict) and result.result.get("isError") is True
        return "tool_error" if is_error and tool.source == "mcp" else ""
    m = _MCP_ERROR.match(result.error)
    if m:
        return m.group(1)
    if tool.source == "cli" and result.exit_code not in (None, 0):
        return "nonzero_exit"
    if tool.source == "openapi" and result.status_code >= 400 and result.result is not None:
        return str(result.status_code)  # the backend answered with an error status
    return "_OTHER"  # unreachable, refused arguments, an exec error: the message says which


def egress(registry: Any, tool: ToolDef, result: UpstreamResult, started_s: float, seconds: float) -> Egress:
    """The upstream call of a forwarded call: where it went, when (seconds since the call started), how long it
    took and how it failed."""
    name, source = registry.upstream_of(tool)
    address, port, transport = registry.endpoint_of(tool) if hasattr(registry, "endpoint_of") else ("", 0, "")
    return Egress(
        name=name,
        source=source or tool.source,
        address=address,
        port=port,
        transport=transport,
        start_ms=round(started_s * 1000, 3),
        ms=round(seconds * 1000, 3),
        error_type=error_type(tool, result),
    )
