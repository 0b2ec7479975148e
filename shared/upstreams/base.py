"""The vocabulary shared by every upstream source: tool definitions, call context, call results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

__all__ = [
    "CallContext",
    "Classification",
    "Param",
    "Source",
    "Timings",
    "ToolDef",
    "ToolView",
    "UpstreamResult",
]


class Param(msgspec.Struct):
    """One parameter as GET /tools shows it: `{name, in, type, required}`."""

    name: str
    in_: str = msgspec.field(name="in")
    type: str = "string"
    required: bool = False


class Classification(msgspec.Struct):
    """A guess from declared metadata only, never verified, so `reasons` names each signal."""

    family: str  # named | generic
    access: str  # read | write | unknown
    reasons: list[str] = msgspec.field(default_factory=list)


class ToolView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A GET /tools entry (CONTRACT 1.6), in wire order: Go's omitempty drops empty params, mcp_server and cli_meta."""

    name: str
    description: str
    method: str
    path: str
    base_url: str
    params: list[Param] = msgspec.field(default_factory=list)
    source: str  # openapi | mcp | cli
    mcp_server: str = ""
    cli_meta: dict[str, Any] | None = None
    classification: Classification


class ToolDef(msgspec.Struct, kw_only=True):
    """A callable tool from any source. `name` is the mesh's name; `upstream_name` is what the upstream is
    called with: for MCP the name without the `<server>.` prefix, for a CLI catch-all reached as
    `<cli>.<sub>` the `<sub>`.
    """

    name: str
    description: str = ""
    method: str = ""
    path: str = ""
    base_url: str = ""
    params: list[Param] = msgspec.field(default_factory=list)
    source: str  # openapi | mcp | cli
    mcp_server: str = ""
    cli_meta: dict[str, Any] | None = None
    classification: Classification
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    upstream_name: str = ""
    annotations: dict[str, Any] | None = None  # MCP tool annotations, verbatim
    # What an MCP upstream declares besides (tools/list passes them on unchanged: docs/mcp.md); OpenAPI
    # and CLI tools may declare an output schema too (their result then also travels as structuredContent).
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    icons: list[Any] | None = None
    meta: dict[str, Any] | None = None  # the tool definition's `_meta`

    def view(self) -> ToolView:
        return ToolView(
            name=self.name,
            description=self.description,
            method=self.method,
            path=self.path,
            base_url=self.base_url,
            params=self.params,
            source=self.source,
            mcp_server=self.mcp_server,
            cli_meta=self.cli_meta,
            classification=self.classification,
        )

    def fingerprint_text(self) -> str:
        """What an upstream declares about a tool, canonically: the input of pinning's change detection.
        `title` and `output_schema` count only when declared, so a tool declaring neither keeps the fingerprint
        it had before they were captured (shared/gate/pins.py upgrades the pins of those that do)."""
        declared = self._legacy_fields()
        if self.title is not None:
            declared["title"] = self.title  # what a client shows and a model may read
        if self.output_schema is not None:
            declared["output_schema"] = self.output_schema
        return msgspec.json.encode(declared, order="sorted").decode()

    def legacy_fingerprint_text(self) -> str:
        """The fingerprint input before title and outputSchema were captured: pins written then hash this."""
        return msgspec.json.encode(self._legacy_fields(), order="sorted").decode()

    def _legacy_fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,  # a flipped readOnlyHint changes what auto-approval trusts
        }


class CallContext(msgspec.Struct):
    trace_id: str
    traceparent: str
    agent_id: str
    session_id: str = ""


class UpstreamResult(msgspec.Struct):
    """`error` set means the call failed; `status_code` is the upstream's own status (HTTP status, 422 for a
    non-zero CLI exit, 502 for an unreachable upstream or an MCP JSON-RPC error, 504 when it timed out).
    `timed_out` tells the mesh's 504 from a backend that answered 504 itself."""

    result: Any = None
    status_code: int = 200
    error: str = ""
    exit_code: int | None = None
    timed_out: bool = False


@dataclass(frozen=True)
class Timings:
    """Connection and retry timings (CONTRACT 1.15). Tests shorten them; production keeps the defaults."""

    start_timeout: float = 30.0  # first connection of every source, in parallel
    reconnect_timeout: float = 15.0  # each later connection attempt
    retry_first: float = 5.0  # a server down at start: first wait, doubling ...
    retry_max: float = 300.0  # ... up to this
    reconnect_first: float = 1.0  # a lost connection: first wait, doubling ...
    reconnect_max: float = 30.0  # ... up to this
    call_timeout: float = 300.0  # one MCP request (an MCP server's default `timeout.read`)
    http_timeout: float = 30.0  # one OpenAPI backend request (its default `timeout.read`); the SSE POST timeout
    connect_timeout: float = 10.0  # opening a connection to an HTTP upstream (the default `timeout.connect`)


class Source(Protocol):
    """One configured upstream (an OpenAPI spec, an MCP server, a CLI binary) as the registry sees it."""

    name: str

    def tools(self) -> list[ToolDef]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def call(self, tool: ToolDef, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult: ...
