"""What the hot paths (functions/hotpath.py, functions/mcp_hotpath.py) share, and how they are served from raw ASGI.

A hot path is a `RawRoute`: given the request's path, headers (a dict: lower-case names, latin-1 text, the first
of repeated headers, as Litestar's Headers.get answers), peer address, scheme and a way to read the body, it
returns the answer (status, JSON body, extra headers), `GONE` when the client left before its body was in, or
None when Litestar should serve the request instead (nothing read yet). Served from ASGI here (an app in process,
the HTTP API beside `mesh7 --mcp`), from granian's RSGI interface under `flux7 serve` (functions/rsgi.py); the
answer is sent as Litestar sends a `Response[bytes]`: the extra headers, then content-type and content-length."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from flux7.shared.errors import Flux7Error

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = [
    "GONE",
    "INTERNAL",
    "TOO_LARGE",
    "Answer",
    "BodyReader",
    "BodyTooLarge",
    "RawRoute",
    "error_answer",
    "header_dict",
    "read_body",
    "send_json",
]

_JSON = (b"content-type", b"application/json")
TOO_LARGE = msgspec.json.encode({"error": "request body too large"})
INTERNAL = msgspec.json.encode({"error": "internal error"})

Answer = tuple[int, bytes, dict[str, str] | None]  # status, JSON body, extra headers
GONE: Answer = (0, b"", None)  # the client went away before its body was in: nobody to answer
# Reads the body: (declared length, -1 when chunked; the size cap) -> the bytes, None when the client went away.
# Raises BodyTooLarge past the cap.
BodyReader = Callable[[int, int], Awaitable[bytes | None]]


class BodyTooLarge(Exception):
    """More body than the size cap: answered 413, as Litestar's cap does."""


def error_answer(error: Flux7Error) -> Answer:
    """A typed error, as functions/errors.py renders it."""
    return (
        error.status_code,
        msgspec.json.encode(error.body()),
        {"Retry-After": "1"} if error.status_code == 503 else None,
    )


class RawRoute:
    """A route served ahead of Litestar, for an app whose console origins are `allowed_origins`."""

    def __init__(self, mesh: Mesh, max_body: int, allowed_origins: tuple[str, ...]) -> None:
        self.mesh = mesh
        self.max_body = max_body
        self.allowed = allowed_origins

    async def answer(
        self, path: str, headers: dict[str, str], peer: str, scheme: str, read: BodyReader
    ) -> Answer | None:
        raise NotImplementedError

    async def __call__(self, scope: Any, receive: Any, send: Any) -> bool:
        """Serve an ASGI request; False (nothing read, nothing sent) when Litestar should have it instead."""
        client = scope.get("client")
        answer = await self.answer(
            scope["path"],
            header_dict(scope["headers"]),
            str(client[0]) if client else "",
            str(scope.get("scheme") or "http"),
            partial(read_body, receive),
        )
        if answer is None:
            return False
        if answer is not GONE:
            await send_json(send, *answer)
        return True


# The decoded, lower-cased text of the header names seen: a governed call sends the same few names every time,
# and a lookup is one step where decode-then-lower is two function calls per header (issue 19). Bounded: the
# names are the client's to choose.
_NAMES: dict[bytes, str] = {}
_NAMES_MAX = 512


def header_dict(raw: Any) -> dict[str, str]:
    names = _NAMES
    headers: dict[str, str] = {}
    for key, value in raw:
        try:
            name = names[key]
        except KeyError:
            name = key.decode("latin-1").lower()
            if len(names) >= _NAMES_MAX:
                names.clear()
            names[bytes(key)] = name
        if name not in headers:
            headers[name] = value.decode("latin-1")
    return headers


async def read_body(receive: Any, expected: int, max_body: int) -> bytes | None:
    """The request body, or None when the client went away. A body of a declared length (`expected` >= 0) is read
    once that many bytes are in: granian hands the bytes over with more_body set and the (empty) end of the body as
    a second event, each one a hop from its I/O thread to the event loop, and the second carries nothing (issue 19,
    c=1); a declared empty body is not read at all. `expected` -1 (chunked) reads to the end. Past `max_body`:
    BodyTooLarge."""
    chunks: list[bytes] = []
    size = 0
    while size < expected or expected < 0:
        event = await receive()
        if event["type"] == "http.disconnect":
            return None
        chunk = event.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > max_body:
                raise BodyTooLarge
            chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_json(send: Any, status: int, body: bytes, extra: dict[str, str] | None) -> None:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()] if extra else []
    headers.append(_JSON)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
