"""A small keep-alive HTTP/1.1 client for MCP upstreams: one connection pool per upstream, any number of
requests in flight, answers read whole or as they arrive (event streams).

Why not httpx: an MCP call through the mesh is one small POST, so the client's CPU is the mesh's cost per
call, and httpx spends ~0.4 ms per request in its layers and scans every pooled connection on each request
(quadratic under concurrency). This client does only what the MCP transports need: a request with a byte
body; Content-Length, chunked or close-delimited answers; http and https. No proxies, no redirects, no
compression (none is asked for), no HTTP/2.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from urllib.parse import quote, unquote, urlsplit

__all__ = ["HttpError", "HttpPool", "HttpResponse", "HttpTimeout", "SseParser", "is_token", "valid_headers"]

_MAX_HEAD = 256 * 1024  # status line and headers
_MAX_CHUNK_LINE = 4096
_READ_SIZE = 256 * 1024
_USER_AGENT = "flux7-mesh/0.1.0"
# Set by the client on each request; a configured header of the same name is ignored.
_OWN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "content-type", "accept", "user-agent"}
)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class HttpError(Exception):
    """No usable answer: the connection failed, was closed early, or the answer is not HTTP/1.x."""


class HttpTimeout(HttpError):
    """The connection could not be made in time (the server may be busy, not gone)."""


class _Closed(HttpError):
    """The peer closed the connection."""


def is_token(name: str) -> bool:
    """An RFC 9110 token: what a header name may be."""
    return _TOKEN.fullmatch(name) is not None


def valid_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """Configured headers checked for what could split a request (a newline in a value), minus the ones the
    client sets itself. Raises ValueError naming the bad header."""
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not is_token(name) or any(c in value for c in "\r\n\0") or not _latin1(value):
            raise ValueError(f"header {name!r} is not a valid HTTP header")
        if name.lower() not in _OWN_HEADERS:
            out.append((name, value))
    return out


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


class _Conn(asyncio.Protocol):
    """One TCP (or TLS) connection: bytes arrive into a buffer; readers wait on a future."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.got_bytes = False  # any byte since the request was written (a stale keep-alive sends none)
        self.idle_since = 0.0
        self.deadline: float | None = None  # loop time by which a wait for bytes must end (TimeoutError)
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.got_bytes = True
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # let asyncio close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self._wake()

    # -- reading

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        if self.eof:
            raise _Closed("connection closed by the server")
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        # A timer on the waiter itself: cheaper than asyncio.timeout's per call (a read timeout on every
        # forwarded call).
        timer = loop.call_at(self.deadline, _expire, waiter) if self.deadline is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def read_until(self, sep: bytes, limit: int) -> bytes:
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                end = i + len(sep)
                out = bytes(self.buf[:end])
                del self.buf[:end]
                return out
            if len(self.buf) > limit:
                raise HttpError("response header or chunk line too long")
            start = max(0, len(self.buf) - len(sep) + 1)
            await self._wait()

    async def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._wait()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_some(self, n: int) -> bytes:
        """Up to n bytes, at least one; b"" only at the end of the stream."""
        while not self.buf:
            if self.eof:
                return b""
            await self._wait()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    # -- pooling

    def reusable(self) -> bool:
        t = self.transport
        return not self.eof and not self.buf and t is not None and not t.is_closing()

    def close(self) -> None:
        self.eof = True
        if self.transport is not None:
            self.transport.close()


@functools.lru_cache(maxsize=1024)  # a forwarded tool without arguments in its URL asks for the same one each call
def _target(url: str) -> str:
    parts = urlsplit(url)
    # Percent-encode what may not travel raw (spaces, non-ASCII); escapes already there stay.
    path = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
    return path + (f"?{quote(parts.query, safe='/?%:@!$&()*+,;=-._~')}" if parts.query else "")


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class HttpResponse:
    """Status and headers; the body is read with read() or chunks(); close() gives the connection back."""

    def __init__(self, pool: HttpPool, conn: _Conn, status: int, headers: dict[str, str], keep: bool) -> None:
        self.status = status
        self.headers = headers  # lower-case names
        self._pool = pool
        self._conn: _Conn | None = conn
        self._keep = keep
        self._done = False
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        self._length: int | None = None
        if status in (204, 304):
            self._length = 0
        elif not self._chunked and "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise HttpError(f"bad Content-Length: {headers['content-length']!r}")
            self._length = int(values.pop())
        elif not self._chunked:
            self._keep = False  # the body ends when the server closes the connection

    def buffered(self) -> bool:
        """Whether the whole body is already here (reading it will not wait)."""
        conn = self._conn
        return conn is not None and self._length is not None and len(conn.buf) >= self._length

    async def read(self) -> bytes:
        conn = self._conn
        if conn is not None and self._length is not None and not self._done:
            body = await conn.read_exactly(self._length)
            self._finish()
            return body
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None or self._done:
            return
        if self._length is not None:
            left = self._length
            while left:
                data = await conn.read_some(min(left, _READ_SIZE))
                if not data:
                    raise _Closed("connection closed before the end of the body")
                left -= len(data)
                yield data
        elif self._chunked:
            while True:
                line = await conn.read_until(b"\r\n", _MAX_CHUNK_LINE)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise HttpError("bad chunk size") from None
                if size == 0:
                    while await conn.read_until(b"\r\n", _MAX_HEAD) != b"\r\n":  # trailers
                        pass
                    break
                while size:
                    data = await conn.read_some(min(size, _READ_SIZE))
                    if not data:
                        raise _Closed("connection closed inside a chunk")
                    size -= len(data)
                    yield data
                if await conn.read_exactly(2) != b"\r\n":
                    raise HttpError("chunk not followed by CRLF")
        else:
            while data := await conn.read_some(_READ_SIZE):
                yield data
        self._finish()

    def _finish(self) -> None:
        self._done = True
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn, self._keep)

    def close(self) -> None:
        """Give the connection back when the body was read to its end; otherwise close it (which is also how
        a request is abandoned: the server sees the stream close)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class HttpPool:
    """Keep-alive connections to one origin. No cap on connections in flight (as before with httpx);
    at most `max_idle` are kept between requests, each for at most `idle_expiry` seconds."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float,
        max_idle: int = 64,
        idle_expiry: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be an http or https URL: {url}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        default = 443 if parts.scheme == "https" else 80
        self.port = parts.port or default
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host if self.port == default else f"{host}:{self.port}"
        self._basic = ""  # credentials in the URL, sent as httpx sent them
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self._basic = f"Basic {base64.b64encode(pair).decode('ascii')}"
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.idle_expiry = idle_expiry
        self._idle: list[_Conn] = []
        self._ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._ssl = ssl_context or _ssl_context()
        self._closed = False

    def target(self, url: str) -> str:
        """The request target (path and query) of a URL on this origin."""
        return _target(url)

    def head(self, method: str, url: str, headers: list[tuple[str, str]]) -> bytes:
        """The request line and the headers every request of this kind shares (without Content-Length)."""
        lines = [f"{method} {self.target(url)} HTTP/1.1", f"Host: {self.authority}", f"User-Agent: {_USER_AGENT}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if self._basic and not any(k.lower() == "authorization" for k, _ in headers):
            lines.append(f"Authorization: {self._basic}")
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _Conn,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise HttpTimeout(f"connect to {self.authority} timed out") from None
        return conn

    def _take_idle(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()  # the most recent: least likely to have been closed by the server
            if conn.reusable() and now - conn.idle_since < self.idle_expiry:
                return conn
            conn.close()
        return None

    def release(self, conn: _Conn, keep: bool) -> None:
        if keep and not self._closed and len(self._idle) < self.max_idle and conn.reusable():
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    async def request(
        self, head: bytes, body: bytes, *, method: str = "POST", read_timeout: float | None = None
    ) -> HttpResponse:
        """Send `head` (from head(), plus any per-request header lines) and `body`; return once the status
        and headers are in (raising TimeoutError when they take over `read_timeout` seconds once connected).
        A kept-alive connection closed without a byte of answer is retried once on a new one: that is a server
        closing an idle connection as the request went out. (A server that read the request and then dropped
        the connection unanswered would see it twice; browsers make the same bet.)"""
        if self._closed:
            raise HttpError("client closed")
        message = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        for _ in range(2):
            conn = self._take_idle()
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            conn.got_bytes = False
            try:
                assert conn.transport is not None
                conn.transport.write(message)
                if read_timeout is not None:
                    conn.deadline = asyncio.get_running_loop().time() + read_timeout
                try:
                    status, headers, keep = await _read_head(conn)
                finally:
                    conn.deadline = None
                return HttpResponse(self, conn, status, headers, keep and method != "HEAD")
            except _Closed:
                conn.close()
                if reused and not conn.got_bytes:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
        raise _Closed("connection closed by the server")  # pragma: no cover - the loop returns or raises

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# The lower-case form of the answer header names seen: an upstream sends the same few every time, and a lookup
# is one call where strip-then-lower is two per header (docs/benchmarks.md). Bounded: the names are the upstream's.
_NAMES: dict[str, str] = {}
_NAMES_MAX = 256


async def _read_head(conn: _Conn) -> tuple[int, dict[str, str], bool]:
    while True:
        raw = await conn.read_until(b"\r\n\r\n", _MAX_HEAD)
        lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise HttpError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpError(f"malformed header line: {line[:80]!r}")
            key = _NAMES.get(name)
            if key is None:
                key = name.strip().lower()
                if len(_NAMES) >= _NAMES_MAX:
                    _NAMES.clear()
                _NAMES[name] = key
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if 100 <= status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            continue
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return status, headers, keep


_SSL: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """The system's trust store, plus certifi's when installed (what httpx trusted before)."""
    global _SSL
    if _SSL is None:
        ctx = ssl.create_default_context()
        try:
            import certifi

            ctx.load_verify_locations(certifi.where())
        except (ImportError, OSError):
            pass
        _SSL = ctx
    return _SSL


_EOL = re.compile(rb"\r\n|\r|\n")


class SseParser:
    """text/event-stream, fed bytes as they arrive: complete events come out as (event, data) pairs, where
    `event` is "" when the server names none and `data` is the data lines joined by newlines."""

    def __init__(self) -> None:
        self._rest = b""
        self._event = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        buf = self._rest + chunk if self._rest else chunk
        out: list[tuple[str, bytes]] = []
        start = 0
        for m in _EOL.finditer(buf):
            if m.end() == len(buf) and buf[m.start()] == 13 and m.end() - m.start() == 1:
                break  # a CR at the end may be the first half of CRLF
            self._line(buf[start : m.start()], out)
            start = m.end()
        self._rest = buf[start:]
        return out

    def end(self) -> list[tuple[str, bytes]]:
        """The stream ended: an unterminated last line and event still count."""
        out: list[tuple[str, bytes]] = []
        if self._rest:
            self._line(self._rest.rstrip(b"\r"), out)
            self._rest = b""
        if self._data:
            out.append((self._event.decode("utf-8", "replace"), b"\n".join(self._data)))
        self._event, self._data = b"", []
        return out

    def _line(self, line: bytes, out: list[tuple[str, bytes]]) -> None:
        if not line:
            if self._data:
                out.append((self._event.decode("utf-8", "replace"), b"\n".join(self._data)))
            self._event, self._data = b"", []
        elif line[0] != 58:  # ":" starts a comment
            field, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                self._data.append(value)
            elif field == b"event":
                self._event = value
