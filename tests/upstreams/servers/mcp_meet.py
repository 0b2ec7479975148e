"""An MCP server on the official SDK for the upstream client's concurrency and negotiation tests.

Run: python mcp_meet.py [--transport stdio|sse|streamable-http] [--port N] [--handshake-only] [--only-2024]

Tools:
- meet(group, n): returns "met" once n calls of `group` are inside the tool at the same time, or after 10 s
  "alone (k of n)". A client that sends one call at a time, or waits for answers in order, cannot pass it.
- echo(text): the text back.
- route(region): the region back; `region` is annotated `x-mcp-header: Region`, so a stateless (2026-07-28)
  call must mirror it in an `Mcp-Param-Region` header or the SDK refuses it.

Streamable HTTP options, to stand in for servers older than the SDK installed here:
- --handshake-only: a request naming a revision newer than the handshake era (the 2026-07-28 `server/discover`
  probe) is refused with 400 and JSON-RPC -32600, as SDK 1.x servers refuse an unknown MCP-Protocol-Version;
  everything else (initialize, sessions, event-stream answers) is the SDK's own.
- --only-2024 (implies --handshake-only): an `initialize` offering anything but 2024-11-05 gets JSON-RPC
  -32602, as a strict 2024 server might answer.
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from pydantic import Field

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
WAIT_SECONDS = 10.0

Asgi = Any


def build() -> MCPServer:
    server = MCPServer("mcp-meet", log_level="WARNING")
    groups: dict[str, tuple[list[int], anyio.Event]] = {}

    @server.tool(description="Return once n calls of the group are inside at the same time.")
    async def meet(group: str, n: int) -> str:
        inside, everyone = groups.setdefault(group, ([0], anyio.Event()))
        inside[0] += 1
        if inside[0] >= n:
            everyone.set()
        with anyio.move_on_after(WAIT_SECONDS):
            await everyone.wait()
        return "met" if everyone.is_set() else f"alone ({inside[0]} of {n})"

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Return the region, which travels in a header too.")
    def route(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return region

    return server


async def _reply(send: Any, status: int, answer: dict[str, Any]) -> None:
    body = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def handshake_only(app: Asgi, only_2024: bool) -> Asgi:
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode()
        if version and version not in HANDSHAKE_VERSIONS:
            error = {"code": -32600, "message": f"Bad Request: Unsupported protocol version: {version}"}
            await _reply(send, 400, {"jsonrpc": "2.0", "id": "server-error", "error": error})
            return
        if not only_2024 or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") == "initialize":
            offered = (request.get("params") or {}).get("protocolVersion")
            if offered != "2024-11-05":
                error = {"code": -32602, "message": f"Unsupported protocol version: {offered}"}
                await _reply(send, 200, {"jsonrpc": "2.0", "id": request.get("id"), "error": error})
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio", choices=["stdio", "sse", "streamable-http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--handshake-only", action="store_true")
    parser.add_argument("--only-2024", action="store_true")
    ns = parser.parse_args()
    server = build()
    if ns.transport == "stdio":
        server.run("stdio")
        return
    if ns.transport == "sse":
        server.run("sse", host="127.0.0.1", port=ns.port)
        return
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    if ns.handshake_only or ns.only_2024:
        app = handshake_only(app, ns.only_2024)
    uvicorn.run(app, host="127.0.0.1", port=ns.port, log_level="warning")


if __name__ == "__main__":
    main()
