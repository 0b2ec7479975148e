"""`flux7 serve` on granian's RSGI interface (issue 19): the fast paths (functions/fastpath.py: the governed call,
POST /mcp) are answered straight from RSGI, everything else goes to the Litestar app through a bridge that speaks
ASGI to it.

Why RSGI: on ASGI, granian builds a scope dict with every header as bytes for each request, and the answer crosses
from the event loop to its I/O thread as two ASGI events (the answer's start and its body), each awaited. On RSGI
the headers are read only when asked for, the body is one await and the answer one synchronous call. Measured on
this machine's 2 cores, one worker saturated at c=32: about 10% less CPU per governed call (docs/benchmarks.md,
"The seventh step").

The bridge gives Litestar the scope granian's own ASGI interface gives (the same keys and value types, the
`http.response.pathsend` extension for static files), the body as granian's ASGI hands it over (each chunk with
more_body set, then an empty end), `http.disconnect` once the client has gone, and the lifespan run by granian's
own ASGI lifespan handler. One difference is granian's, not the bridge's: on RSGI a request header whose value is
not visible ASCII is not handed over at all (on ASGI, its bytes are): such a request is served as if the client
had not sent that header, which a client can always do anyway."""

from __future__ import annotations

import contextlib
import logging
import sys
from functools import partial
from typing import Any
from urllib.parse import quote

from granian._granian import RSGIProtocolClosed as ProtocolClosed  # granian.rsgi re-exports them untyped
from granian._granian import RSGIProtocolError as ProtocolError
from granian.asgi import LifespanProtocol

from flux7.functions.fastpath import GONE

__all__ = ["RsgiApp"]

log = logging.getLogger("flux7.http")

_ASGI = {"version": "3.0", "spec_version": "2.3"}
_EXTENSIONS: dict[str, Any] = {"http.response.pathsend": {}}
_JSON = ("content-type", "application/json")
_END = {"type": "http.request", "body": b"", "more_body": False}
_DISCONNECT = {"type": "http.disconnect"}
_UNREAD = object()  # a request body nobody has asked for yet
# What a path may hold unescaped (RFC 3986 pchar and "/"): raw_path is the path as a client would have sent it.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def _address(text: str) -> tuple[str, str]:
    """granian's RSGI address text (`127.0.0.1:5000`, `[::1]:5000`) as its ASGI scope gives it: (host, port)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), port


def _header_dict(scope: Any) -> dict[str, str]:
    """The first of repeated headers wins, as functions/raw_asgi.py `header_dict` (names arrive lower-cased)."""
    return dict(reversed(scope.headers.items()))


async def _read_body(protocol: Any, expected: int) -> bytes | None:
    """A fast path's body, of a declared length: granian reads exactly that many bytes (the Content-Length framing),
    in one await. None when the client went away."""
    try:
        return bytes(await protocol())
    except (ProtocolClosed, ProtocolError):
        return None


class RsgiApp:
    """The mesh's Litestar app (functions/app.py `_App`) served over RSGI: its fast paths straight, the rest bridged."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._lifespan = LifespanProtocol(app)
        # the largest body Litestar takes (the mesh's max_body_bytes): a refused request's body up to that size is
        # read before the answer (_Bridge.settle_body)
        self.body_cap = int(getattr(app, "request_max_body_size", None) or 0)

    # -- the worker's life: the ASGI lifespan, as granian's ASGI workers run it ---------------------------------

    def __rsgi_init__(self, loop: Any) -> None:
        loop.run_until_complete(self._lifespan.startup())
        if self._lifespan.interrupt:
            log.error("the app did not start", exc_info=self._lifespan.exc)
            sys.exit(1)

    def __rsgi_del__(self, loop: Any) -> None:
        loop.run_until_complete(self._lifespan.shutdown())

    # -- requests ----------------------------------------------------------------------------------------------

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":  # websockets are off (shared/cli/serve.py): granian never hands one over
            return
        fast = self.app.fast
        handler = fast.route(scope.method, scope.path)
        if handler is not None:
            headers = _header_dict(scope)
            read = partial(_read_body, protocol)
            answer = await fast.answer(
                handler, scope.method, scope.path, headers, _address(scope.client)[0], scope.scheme, read
            )
            if answer is not None:
                if answer is not GONE:
                    status, body, extra = answer
                    out = [(k.lower(), v) for k, v in extra.items()] if extra else []
                    out.append(_JSON)  # granian adds the Content-Length of the bytes
                    out.extend(fast.trailing(headers))
                    protocol.response_bytes(status, out, body)
                return
        await _Bridge(scope, protocol, self.body_cap).run(self.app, self._lifespan.state)


class _Bridge:
    """One request handed to the ASGI app: its scope, its receive and send."""

    __slots__ = ("answered", "body", "body_cap", "headers", "protocol", "scope", "status", "stream")

    def __init__(self, scope: Any, protocol: Any, body_cap: int = 0) -> None:
        self.scope = scope
        self.protocol = protocol
        self.body_cap = body_cap
        self.body: Any = _UNREAD  # the request body's chunks once asked for; None once all are in
        self.status = 0  # the answer's status, once its start was sent
        self.headers: list[tuple[str, str]] = []
        self.stream: Any = None  # the answer's stream, once a body part said more_body
        self.answered = False  # granian has the answer (its head at least)

    async def run(self, app: Any, state: dict[str, Any]) -> None:
        s = self.scope
        path = s.path
        asgi_scope = {
            "type": "http",
            "asgi": _ASGI,
            "extensions": _EXTENSIONS,
            "http_version": s.http_version,
            "server": _address(s.server),
            "client": _address(s.client),
            "scheme": s.scheme,
            "method": s.method,
            "root_path": "",
            "path": path,
            "raw_path": quote(path, safe=_PATH_SAFE).encode("ascii"),
            "query_string": s.query_string.encode("latin-1"),
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in s.headers.items()],
            "state": state.copy(),
        }
        try:
            await app(asgi_scope, self.receive, self.send)
        except Exception:
            log.exception("unhandled error on %s %s", s.method, path)
        if not self.answered:  # the app failed or answered nothing: a 500, as granian's ASGI interface answers
            self.protocol.response_empty(500, [])

    async def receive(self) -> dict[str, Any]:
        if self.body is _UNREAD:
            self.body = self.protocol.__aiter__()
        if self.body is not None:
            try:
                chunk = await self.body.__anext__()
            except StopAsyncIteration:
                self.body = None
                return _END
            except (ProtocolClosed, ProtocolError):
                self.body = None
                return _DISCONNECT
            return {"type": "http.request", "body": bytes(chunk), "more_body": True}
        await self.protocol.client_disconnect()
        return _DISCONNECT

    async def settle_body(self) -> None:
        """Before an answer to a request whose body the app never read (a refusal: the browser guard's 403 and 415,
        a 401): read that body when its declared length is within the app's cap. granian keeps a connection alive
        after such an answer only if the unread bytes had already arrived, and otherwise closes it and says
        `connection: close`: which one a client saw depended on packet timing. Read, the connection is kept every
        time. A body over the cap is left unread (refused without taking it in), and the answer says
        `connection: close` every time: the connection cannot carry another request after unread bytes."""
        if self.body is not _UNREAD:
            return
        length = self.scope.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) == 0:
            return
        if int(length) > self.body_cap:
            if self.body_cap and all(k.lower() != "connection" for k, _ in self.headers):
                self.headers.append(("connection", "close"))
            return
        self.body = None
        with contextlib.suppress(ProtocolClosed, ProtocolError):  # the client went away: nothing to keep
            await self.protocol()

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", ())]
            return
        if kind == "http.response.body":
            body = message.get("body", b"")
            if self.stream is None:
                await self.settle_body()
                self.answered = True
                if not message.get("more_body", False):
                    self.protocol.response_bytes(self.status, self.headers, body)
                    return
                self.stream = self.protocol.response_stream(self.status, self.headers)
            if body:
                with contextlib.suppress(ProtocolClosed, ProtocolError):  # gone: the app learns it from receive()
                    await self.stream.send_bytes(body)
            return
        if kind == "http.response.pathsend":
            await self.settle_body()
            self.answered = True
            self.protocol.response_file(self.status, self.headers, message["path"])
