"""The floor under any governed call (issue 19): an app on granian's RSGI interface, as `flux7 serve` runs the mesh
(functions/rsgi.py), that reads the request body, forwards it to the echo backend with the mesh's own keep-alive
HTTP client (shared/upstreams/mcp_http.py) and answers with the backend's body, and does nothing else: no
identity, policy, limits, trace or metrics. What it costs is what serving a forwarded call from Python on this
server costs before any governance; bench/governed_call_bench.py measures it beside the direct backend and the
mesh.

Run: FLUX7_BARE_BACKEND=http://127.0.0.1:PORT python -m granian --interface rsgi --loop asyncio bench._bare_proxy:app"""

from __future__ import annotations

import os
from typing import Any

from flux7.shared.upstreams.mcp_http import HttpPool

_BACKEND = os.environ.get("FLUX7_BARE_BACKEND", "http://127.0.0.1:8000")
_JSON = [("content-type", "application/json")]


class BareForwarder:
    def __init__(self) -> None:
        self.pool: HttpPool | None = None
        self.head = b""

    def __rsgi_del__(self, loop: Any) -> None:
        if self.pool is not None:
            loop.run_until_complete(self.pool.aclose())

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":
            return
        if self.pool is None:
            self.pool = HttpPool(_BACKEND, connect_timeout=5.0)
            self.head = self.pool.head("POST", f"{_BACKEND}/echo", [("Content-Type", "application/json")])
        response = await self.pool.request(self.head, await protocol(), read_timeout=30.0)
        protocol.response_bytes(response.status, _JSON, await response.read())


app = BareForwarder()
