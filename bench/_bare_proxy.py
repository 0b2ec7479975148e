"""The floor under any governed call (issue 19): an ASGI app on granian that reads the request body, forwards it
to the echo backend with the mesh's own keep-alive HTTP client (shared/upstreams/mcp_http.py) and answers with the
backend's body, and does nothing else: no identity, policy, limits, trace or metrics. What it costs is what
serving a forwarded call from Python on this ASGI server costs before any governance; bench/governed_call_bench.py
measures it beside the direct backend and the mesh.

Run: FLUX7_BARE_BACKEND=http://127.0.0.1:PORT python -m granian --interface asgi --loop asyncio bench._bare_proxy:app"""

from __future__ import annotations

import os
from typing import Any

from flux7.shared.upstreams.mcp_http import HttpPool

_BACKEND = os.environ.get("FLUX7_BARE_BACKEND", "http://127.0.0.1:8000")
_JSON = [(b"content-type", b"application/json")]
_pool: HttpPool | None = None
_head = b""


async def app(scope: Any, receive: Any, send: Any) -> None:
    global _pool, _head
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        if _pool is not None:
            await _pool.aclose()
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    if _pool is None:
        _pool = HttpPool(_BACKEND, connect_timeout=5.0)
        _head = _pool.head("POST", f"{_BACKEND}/echo", [("Content-Type", "application/json")])
    chunks = []
    while True:
        event = await receive()
        chunks.append(event.get("body", b""))
        if not event.get("more_body"):
            break
    response = await _pool.request(_head, b"".join(chunks), read_timeout=30.0)
    body = await response.read()
    headers = [*_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
