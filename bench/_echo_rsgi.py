"""A raw echo backend for benchmarks, on granian's RSGI interface (no Python framework): every HTTP request is
answered 200 with its own body (`{}` when it has none), as JSON."""

from __future__ import annotations

from typing import Any

_HEADERS = [("content-type", "application/json")]


async def app(scope: Any, protocol: Any) -> None:
    if scope.proto != "http":
        return
    body = await protocol()
    protocol.response_bytes(200, _HEADERS, body or b"{}")
