"""An upstream MCP server written with the official SDK (mcp 2.x), for tests of every suite.

Run: python -m tests.upstreams.servers.mcp_echo [--transport stdio|sse|streamable-http] [--port N]

Tools: echo, read_file (readOnlyHint), write_file (destructiveHint), search (a richer schema),
fail (answers a JSON-RPC error), broken (answers an isError result), whoami (returns the call's _meta).
Environment (a fixture, so it reads its own environment):
- MCP_ECHO_DESCRIPTION replaces echo's description (pinning tests see a changed tool);
- MCP_ECHO_EXTRA_TOOL=1 adds a tool named `extra` (pinning tests see a new tool);
- MCP_ECHO_PIDFILE, when set, receives the process id once the server is up (kill/restart tests).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations

FAIL_CODE = -32042
FAIL_MESSAGE = "the upstream refused"


def build() -> MCPServer:
    server = MCPServer("mcp-echo")

    @server.tool(description=os.environ.get("MCP_ECHO_DESCRIPTION") or "Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Read a text file.", annotations=ToolAnnotations(read_only_hint=True))
    def read_file(path: str) -> str:
        return Path(path).read_text()

    @server.tool(
        description="Write a text file.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def write_file(path: str, content: str) -> str:
        Path(path).write_text(content)
        return f"wrote {len(content)} bytes"

    @server.tool(description="Search with filters.")
    def search(query: str, limit: int = 10, tags: list[str] | None = None) -> str:
        return json.dumps({"query": query, "limit": limit, "tags": tags or []})

    @server.tool(description="Always answers a JSON-RPC error.")
    def fail() -> str:
        raise MCPError(FAIL_CODE, FAIL_MESSAGE)

    @server.tool(description="Always answers an isError result.")
    def broken() -> str:
        raise ToolError("broken on purpose")

    @server.tool(description="Return the _meta the call carried.")
    def whoami(ctx: Context) -> str:
        meta: Any = ctx.request_context.meta
        if meta is None:
            return "{}"
        if hasattr(meta, "model_dump"):
            meta = meta.model_dump(by_alias=True, exclude_none=True)
        return json.dumps(meta, sort_keys=True)

    if os.environ.get("MCP_ECHO_EXTRA_TOOL") == "1":

        @server.tool(description="A tool that appears only with MCP_ECHO_EXTRA_TOOL=1.")
        def extra() -> str:
            return "extra"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio", choices=["stdio", "sse", "streamable-http"])
    parser.add_argument("--port", type=int, default=0)
    ns = parser.parse_args()
    pidfile = os.environ.get("MCP_ECHO_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
    server = build()
    if ns.transport == "stdio":
        server.run("stdio")
    elif ns.transport == "sse":
        server.run("sse", host="127.0.0.1", port=ns.port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=ns.port)


if __name__ == "__main__":
    main()
