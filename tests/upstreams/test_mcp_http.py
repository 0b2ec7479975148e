"""The MCP upstreams' HTTP/1.1 client (shared/upstreams/mcp_http.py) against real sockets on loopback: each
server here is an asyncio server that answers with the exact bytes a case needs."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from flux7.shared.upstreams.mcp_http import HttpError, HttpPool, SseParser, valid_headers

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """Counts connections; `handler(reader, writer, connection_number)` speaks for each."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return head[0], headers, body


@pytest.fixture
async def pools() -> AsyncIterator[Callable[..., HttpPool]]:
    made: list[HttpPool] = []

    def make(url: str, **kw: object) -> HttpPool:
        pool = HttpPool(url, connect_timeout=5.0, **kw)  # type: ignore[arg-type]
        made.append(pool)
        return pool

    yield make
    for pool in made:
        await pool.aclose()


async def post(pool: HttpPool, path: str, body: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    resp = await pool.request(pool.head("POST", f"http://x{path}", []), body)
    try:
        return resp.status, resp.headers, await resp.read()
    finally:
        resp.close()


STREAM = (
    b": a comment\r\n"
    b"event: message\r\n"
    b'data: {"a":\r\n'
    b"data:1}\r\n"
    b"\r\n"
    b"id: 7\n"
    b"data: plain lf\n"
    b"\n"
    b"event: endpoint\r"
    b"data: /messages?x=1\r"
    b"\r"
    b"event: named-but-empty\r\n"
    b"\r\n"
    b"data: last, unterminated"
)
EVENTS = [
    ("message", b'{"a":\n1}'),
    ("", b"plain lf"),
    ("endpoint", b"/messages?x=1"),
    ("", b"last, unterminated"),
]


def parse(chunks: list[bytes]) -> list[tuple[str, bytes]]:
    parser = SseParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)]
    return events + parser.end()


def test_sse_events_are_the_same_however_the_stream_is_cut() -> None:
    assert parse([STREAM]) == EVENTS
    assert parse([STREAM[i : i + 1] for i in range(len(STREAM))]) == EVENTS
    for cut in range(1, len(STREAM)):  # every cut, including between the CR and LF of a CRLF
        assert parse([STREAM[:cut], STREAM[cut:]]) == EVENTS, cut


async def test_bodies_framed_by_length_by_chunks_or_by_close_are_read_whole(
    pools: Callable[..., HttpPool],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while True:
            line, _headers, _body = await read_request(reader)
            path = line.split(" ")[1]
            if path == "/length":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Two: a\r\nx-two: b\r\n\r\nhello")
            elif path == "/chunked":
                writer.write(
                    b"HTTP/1.1 100 Continue\r\n\r\n"
                    b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: x\r\n\r\n"
                )
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
                await writer.drain()
                return
            await writer.drain()

    async with RawServer(handler) as server:
        pool = pools(f"http://127.0.0.1:{server.port}/mcp")
        status, headers, body = await post(pool, "/length")
        assert (status, headers["x-two"], body) == (200, "a, b", b"hello")
        assert (await post(pool, "/chunked"))[::2] == (201, b"hello")
        assert server.connections == 1  # kept alive between requests
        assert (await post(pool, "/close"))[::2] == (200, b"until the end")
        assert (await post(pool, "/length"))[2] == b"hello"
        assert server.connections == 2  # the close-delimited answer used its connection up


async def test_requests_carry_host_length_and_body(pools: Callable[..., HttpPool]) -> None:
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        seen.append(await read_request(reader))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        url = f"http://ann:p%40ss@127.0.0.1:{server.port}/base/my mcp?k=v w"
        pool = pools(url)
        head = pool.head("POST", url, [("X-Api-Key", "s3cret")])
        resp = await pool.request(head + b"Mcp-Method: tools/call\r\n", b'{"x":1}')
        assert (resp.status, await resp.read()) == (204, b"")
        resp.close()
    [(line, headers, body)] = seen
    assert line == "POST /base/my%20mcp?k=v%20w HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["authorization"] == "Basic " + base64.b64encode(b"ann:p@ss").decode()  # from the URL
    assert (headers["x-api-key"], headers["mcp-method"], headers["content-length"]) == ("s3cret", "tools/call", "7")
    assert body == b'{"x":1}'


async def test_a_kept_alive_connection_the_server_dropped_is_replaced_without_an_error(
    pools: Callable[..., HttpPool],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await read_request(reader)  # the next request on this connection is read, then dropped unanswered

    async with RawServer(handler) as server:
        pool = pools(f"http://127.0.0.1:{server.port}/mcp")
        assert (await post(pool, "/"))[2] == b"ok"
        assert (await post(pool, "/"))[2] == b"ok"  # retried once on a new connection
        assert server.connections == 2


async def test_a_fresh_connection_closed_without_an_answer_is_an_error(pools: Callable[..., HttpPool]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)

    async with RawServer(handler) as server:
        with pytest.raises(HttpError):
            await post(pools(f"http://127.0.0.1:{server.port}/mcp"), "/")
        assert server.connections == 1  # not retried: the server may have acted on it


async def test_an_answer_that_is_not_http_is_an_error(pools: Callable[..., HttpPool]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        with pytest.raises(HttpError, match=r"not an HTTP/1\.x answer"):
            await post(pools(f"http://127.0.0.1:{server.port}/mcp"), "/")


async def test_answer_header_names_are_lower_cased_and_repeats_joined_on_every_answer(
    pools: Callable[..., HttpPool],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        for _ in range(2):  # the second answer is read with the names already seen
            await read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\nX-Part: one\r\nx-PART : two\r\nContent-Type:  text/plain \r\n"
                b"Content-Length: 2\r\n\r\nok"
            )
            await writer.drain()

    async with RawServer(handler) as server:
        pool = pools(f"http://127.0.0.1:{server.port}/mcp")
        for _ in range(2):
            status, headers, body = await post(pool, "/")
            assert (status, body) == (200, b"ok")
            assert headers == {"x-part": "one, two", "content-type": "text/plain", "content-length": "2"}
        assert server.connections == 1


def test_a_configured_header_that_could_split_the_request_is_refused() -> None:
    assert valid_headers({"Authorization": "Bearer x", "Accept": "text/plain"}) == [("Authorization", "Bearer x")]
    for bad in ({"X-A": "v\r\nX-Injected: 1"}, {"X A": "v"}, {"X-A": "snow ☃"}):
        with pytest.raises(ValueError, match="not a valid HTTP header"):
            valid_headers(bad)


def _certificate(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: (the server's context, a client context that trusts it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flux7 test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    client = ssl.create_default_context(cafile=str(tmp / "cert.pem"))
    return server, client


async def test_https_verifies_the_server_certificate(tmp_path: Path, pools: Callable[..., HttpPool]) -> None:
    server_tls, trusting = _certificate(tmp_path)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure")
        await writer.drain()

    async with RawServer(handler, tls=server_tls) as server:
        url = f"https://127.0.0.1:{server.port}/mcp"
        assert (await post(pools(url, ssl_context=trusting), "/"))[2] == b"secure"
        with pytest.raises(ssl.SSLCertVerificationError):  # the default trust store does not know it
            await post(pools(url), "/")
