"""The raw ASGI pieces the hot paths (functions/hotpath.py, functions/mcp_hotpath.py) share: the scope's headers
as a dict (lower-case names, latin-1 text, the first of repeated headers, as Litestar's Headers.get answers), the
body read, and a JSON answer sent as Litestar sends a `Response[bytes]` (the extra headers, then content-type and
content-length)."""

from __future__ import annotations

from typing import Any

import msgspec

from flux7.shared.errors import Flux7Error

__all__ = ["INTERNAL", "TOO_LARGE", "BodyTooLarge", "RawRoute", "header_dict", "read_body", "send_error", "send_json"]

_JSON = (b"content-type", b"application/json")
TOO_LARGE = msgspec.json.encode({"error": "request body too large"})
INTERNAL = msgspec.json.encode({"error": "internal error"})


class RawRoute:
    """A route served from raw ASGI ahead of Litestar, for an app whose console origins are `allowed_origins`."""

    def __init__(self, mesh: Any, max_body: int, allowed_origins: tuple[str, ...]) -> None:
        self.mesh = mesh
        self.max_body = max_body
        self.allowed = allowed_origins


class BodyTooLarge(Exception):
    """More body than the size cap: answered 413, as Litestar's cap does."""


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


async def send_error(send: Any, error: Flux7Error) -> None:
    """A typed error, as functions/errors.py renders it."""
    extra = {"Retry-After": "1"} if error.status_code == 503 else None
    await send_json(send, error.status_code, msgspec.json.encode(error.body()), extra)
