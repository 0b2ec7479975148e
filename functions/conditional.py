"""Conditional GETs for the lists a console tab polls (issue 35, item 11).

The Overview asks for the same lists every few seconds, and while nothing happens they do not change. Each 200
answer of these routes gets a strong ETag (a hash of its bytes) and `Cache-Control: no-cache, private`, so the
browser keeps it and asks again with If-None-Match; an answer whose bytes are the same is then a 304 without a
body. The handler still runs (the hash is of its answer), so this saves the network, not the server's work: a
body of ~40 KB every 5 s becomes ~200 bytes of headers. Only the routes listed here: a streamed answer
(`/sse`) cannot be held back to hash it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from litestar.middleware import DefineMiddleware
from litestar.types import ASGIApp, Message, Receive, Send

__all__ = ["POLLED", "conditional_get"]

# What an open Overview polls (docs/console.md, Pages): health, the pending approvals, recent calls, the stops.
POLLED = frozenset({"/health", "/approvals", "/traces", "/halts"})
CACHE_CONTROL = b"no-cache, private"


def _etag(body: bytes) -> bytes:
    return b'"' + hashlib.blake2b(body, digest_size=12).hexdigest().encode() + b'"'


def _matches(if_none_match: bytes, etag: bytes) -> bool:
    tags = {t.strip().removeprefix(b"W/") for t in if_none_match.split(b",")}
    return b"*" in tags or etag in tags


class _ConditionalGet:
    def __init__(self, app: ASGIApp, paths: Iterable[str]) -> None:
        self.app = app
        self.paths = frozenset(paths)

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if_none_match = next((v for k, v in scope["headers"] if k == b"if-none-match"), None)
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def held(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body" or not start:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await self._answer(start, b"".join(chunks), if_none_match, send)

        await self.app(scope, receive, held)

    @staticmethod
    async def _answer(start: dict[str, Any], body: bytes, if_none_match: bytes | None, send: Any) -> None:
        if start["status"] != 200:
            await send(start)
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        etag = _etag(body)
        headers = [(k, v) for k, v in start.get("headers", []) if k not in (b"etag", b"cache-control")]
        headers += [(b"etag", etag), (b"cache-control", CACHE_CONTROL)]
        if if_none_match is not None and _matches(if_none_match, etag):
            kept = [(k, v) for k, v in headers if k not in (b"content-length", b"content-type")]
            await send({"type": "http.response.start", "status": 304, "headers": kept})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def conditional_get(paths: Iterable[str] = POLLED) -> DefineMiddleware:
    """The middleware answering conditional GETs of `paths` (exact paths; any query)."""
    return DefineMiddleware(_ConditionalGet, paths=tuple(paths))
