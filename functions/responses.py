"""JSON answers, one way. An `Answer` (status, body bytes, extra headers) is what the fast paths send
(functions/fastpath.py) and what the routes they share a handler with turn into a Litestar response; `json_response`
is the Litestar response of any JSON value a route cannot return as its annotated type (its status varies, or the
core answers a dict no Struct describes); `send_answer` sends one over raw ASGI as Litestar sends a `Response[bytes]`:
the extra headers, then Content-Type and Content-Length (and any trailing ones, such as CORS's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from litestar import Response
from litestar.enums import MediaType

__all__ = ["JSON", "Answer", "json_answer", "json_response", "response_of", "send_answer"]

JSON = MediaType.JSON.value

Answer = tuple[int, bytes, dict[str, str] | None]  # status, JSON body, extra headers (sent before Content-Type)


def json_answer(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return status, msgspec.json.encode(body), headers


def response_of(answer: Answer) -> Response[bytes]:
    """The Litestar response of an answer: the extra headers, then Content-Type and Content-Length."""
    status, body, headers = answer
    return Response(body, status_code=status, media_type=JSON, headers=headers)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response[bytes]:
    return response_of(json_answer(body, status, headers))


_CONTENT_TYPE = (b"content-type", JSON.encode())


async def send_answer(send: Any, answer: Answer, trailing: Iterable[tuple[str, str]] = ()) -> None:
    status, body, extra = answer
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()] if extra else []
    headers.append(_CONTENT_TYPE)
    headers.append((b"content-length", str(len(body)).encode()))
    headers.extend((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in trailing)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
