"""An upstream MCP server on the official SDK (mcp 2.x) whose tools use what the protocol offers beyond one text
block, for the pass-through tests (DESIGN decision 8): a client of the mesh must see these exactly as sent.

Run: python mcp_rich.py [--transport stdio|streamable-http] [--port N]

Tools (names, definitions and results are in RICH below, so tests compare against the same values):
- weather(city): title, readOnlyHint, an outputSchema; answers structuredContent, two content blocks (text and
  an image) and a result `_meta`;
- wipe(target): title, destructiveHint, a tool `_meta`; answers `isError: true` with its own text;
- plain(text): no title, annotations or output schema; answers one text block (tools declaring nothing keep
  their pin fingerprint).
"""

from __future__ import annotations

import argparse
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
RESULT_META = {"example.com/source": "station-7", "example.com/cached": False}
TOOL_META = {"example.com/danger": "high"}


class Weather(BaseModel):
    city: str
    celsius: float
    conditions: list[str]


def weather_result(city: str) -> dict[str, Any]:
    """The weather tool's result as the wire carries it."""
    structured = {"city": city, "celsius": 21.5, "conditions": ["sunny", "light wind"]}
    return {
        "_meta": RESULT_META,
        "content": [
            {"type": "text", "text": f"{city}: 21.5 °C, sunny <light wind>"},
            {"type": "image", "data": PIXEL, "mimeType": "image/png"},
        ],
        "structuredContent": structured,
        "isError": False,
    }


WIPE_TEXT = "refused: {target} is mounted read-only"


def build() -> MCPServer:
    server = MCPServer("mcp-rich", log_level="WARNING")

    @server.tool(
        title="Current weather",
        description="The weather in a city, structured.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    def weather(city: str) -> Annotated[CallToolResult, Weather]:
        return CallToolResult.model_validate(weather_result(city))

    @server.tool(
        title="Wipe a target",
        description="Erase a target; always fails here.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
        meta=TOOL_META,
    )
    def wipe(target: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=WIPE_TEXT.format(target=target))], isError=True)

    @server.tool(description="One text block back.", structured_output=False)
    def plain(text: str) -> list[TextContent | ImageContent]:
        return [TextContent(type="text", text=text)]

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http"])
    parser.add_argument("--port", type=int, default=0)
    ns = parser.parse_args()
    server = build()
    if ns.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=ns.port)


if __name__ == "__main__":
    main()
