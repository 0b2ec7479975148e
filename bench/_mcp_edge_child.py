"""The child of bench/mcp_edge_bench.py: one checkout's ASGI app in this process, called directly (no server),
sequentially and 32 calls at a time; prints the CPU µs per call of each kind of call, and its count of Python
function calls, as JSON. Run with the checkout
first on PYTHONPATH: python bench/_mcp_edge_child.py CONFIG CALLS"""

from __future__ import annotations

import asyncio
import cProfile
import json
import pstats
import sys
import time
from typing import Any

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
AUTH = [(b"authorization", b"Bearer agent:bench"), (b"content-type", b"application/json"), (b"host", b"mesh")]
Request = tuple[str, bytes, list[tuple[bytes, bytes]]]


def mcp(tool: str) -> Request:
    params = {"name": tool, "arguments": {"text": "hello"}, "_meta": META}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    headers = [
        *AUTH,
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", tool.encode()),
        (b"accept", b"application/json, text/event-stream"),
    ]
    return "/mcp", body, headers


def rest(tool: str) -> Request:
    return f"/tool/{tool}", b'{"params": {"text": "hello"}}', list(AUTH)


async def one(app: Any, request: Request) -> dict[str, Any]:
    path, body, headers = request
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [*headers, (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    read = False

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read:
            await asyncio.Event().wait()  # no disconnect while the answer is made
        read = True
        return {"type": "http.request", "body": body, "more_body": False}

    out: dict[str, Any] = {"body": b""}

    async def send(event: dict[str, Any]) -> None:
        if event["type"] == "http.response.start":
            out["status"] = event["status"]
        else:
            out["body"] += event.get("body", b"")

    await app(scope, receive, send)
    return out


async def main(config: str, calls: int) -> dict[str, float]:
    app = create_app(Mesh(load_settings(config)))
    lifespan_in: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    lifespan_out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, lifespan_in.get, lifespan_out.put))
    await lifespan_in.put({"type": "lifespan.startup"})
    await lifespan_out.get()
    for _ in range(300):  # the MCP upstream connects in the background
        if any(t.name == "echo.echo" for t in app.state.mesh.registry.tools()):
            break
        await asyncio.sleep(0.1)
    kinds = {"rest openapi": rest("echo"), "rest mcp": rest("echo.echo"), "mcp openapi": mcp("echo")}
    kinds["mcp mcp"] = mcp("echo.echo")
    results: dict[str, float] = {}
    for name, request in kinds.items():
        first = await one(app, request)
        if first["status"] != 200 or b"hello" not in first["body"] or b'"isError":true' in first["body"]:
            raise SystemExit(f"{name}: {first}")
        for conc in (1, 32):
            for _ in range(50):
                await one(app, request)
            n = calls // conc

            async def worker(request: Request = request, n: int = n) -> None:
                for _ in range(n):
                    if (await one(app, request))["status"] != 200:
                        raise SystemExit(f"{request[0]}: not 200")

            t0 = time.process_time()
            await asyncio.gather(*[worker() for _ in range(conc)])
            results[f"{name} c={conc}"] = (time.process_time() - t0) * 1e6 / (n * conc)
        # A figure the machine's load does not move: Python function calls (and coroutine resumptions) per call.
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(200):
            await one(app, request)
        profile.disable()
        results[f"{name} function calls"] = pstats.Stats(profile).total_calls / 200
    await lifespan_in.put({"type": "lifespan.shutdown"})
    await lifespan_out.get()
    task.cancel()
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))))
