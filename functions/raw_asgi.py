"""The fast paths (functions/fastpath.py) served from raw ASGI: in process (functions/app.py), and for the HTTP API
beside `mesh7 --mcp`. The answer is sent as Litestar sends a `Response[bytes]` (functions/responses.py
`send_answer`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from flux7.functions.fastpath import GONE, FastHandler, FastPaths
from flux7.functions.responses import send_answer

__all__ = ["header_dict", "read_body", "serve"]


async def serve(fast: FastPaths, handler: FastHandler, scope: Any, receive: Any, send: Any) -> bool:
    """Serve an ASGI request on its fast path; False (nothing read, nothing sent) when Litestar should answer."""
    headers = header_dict(scope["headers"])
    client = scope.get("client")
    answer = await fast.answer(
        handler,
        scope["method"],
        scope["path"],
        headers,
        str(client[0]) if client else "",
        str(scope.get("scheme") or "http"),
        partial(read_body, receive),
    )
    if answer is None:
        return False
    if answer is not GONE:
        await send_answer(send, answer, fast.trailing(headers))
    return True


# The decoded, lower-cased text of the header names seen: a governed call sends the same few names every time,
# and a lookup is one step where decode-then-lower is two function calls per header (issue 19). Bounded: the
# names are the client's to choose.
_NAMES: dict[bytes, str] = {}
_NAMES_MAX = 512


def header_dict(raw: Any) -> dict[str, str]:
    """Lower-case names, latin-1 text, the first of repeated headers (as Litestar's Headers.get answers)."""
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


async def read_body(receive: Any, expected: int) -> bytes | None:
    """The request body of a declared length, or None when the client went away. It is taken once that many bytes
    are in: granian hands the bytes over with more_body set and the (empty) end of the body as a second event, each
    one a hop from its I/O thread to the event loop, and the second carries nothing (issue 19, c=1); a declared
    empty body is not read at all."""
    chunks: list[bytes] = []
    size = 0
    while size < expected:
        event = await receive()
        if event["type"] == "http.disconnect":
            return None
        chunk = event.get("body", b"")
        if chunk:
            size += len(chunk)
            chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
