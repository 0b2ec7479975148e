"""Requests the service sends on a caller's behalf go only to globally routable addresses (docs/security.md).

One guard for every URL a caller supplies (the `X-Callback-URL` of an approval, an OAuth client's metadata
document: shared/auth/client_metadata.py, with its own `oauth.client_metadata_networks`); URLs from the operator's
config (upstreams, `notify_url`, memory, OTLP) are trusted and do not pass through it.

- An address passes when `ipaddress` calls it global and it is not multicast or reserved, or when it lies in a
  network the operator allowed (`outbound.allow_networks`). IPv4-mapped, 6to4 and NAT64 addresses are judged
  by the IPv4 address they carry; Teredo, IPv4-compatible and local-use NAT64 are refused.
- A host is read as the OS resolver reads it: `0x7f.1`, `2130706433`, `0177.0.0.1` and `127.1` are IPv4
  literals (`socket.inet_aton`), never names to look up.
- A name is resolved once per connection, every address it resolves to must pass, and the socket connects to
  those checked addresses: the HTTP layer never resolves the name again, so a second DNS answer (rebinding)
  cannot move the connection. Host and TLS SNI stay the original name (the certificate is checked against it).
- Redirects are followed by `post_json` one hop at a time, each hop through the same check."""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from flux7.shared.errors import OutboundRefused

__all__ = ["GuardedTransport", "OutboundGuard", "Resolver", "parse_url", "post_json", "refusal", "system_resolver"]

log = logging.getLogger("flux7.outbound")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# host, port -> the addresses to connect to, in order (raises OSError when the name does not resolve)
Resolver = Callable[[str, int], Sequence[str]]

_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # RFC 6598; holds 100.100.100.200, a cloud metadata address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: the low 32 bits are the IPv4 target
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215 local-use prefix: site-internal by definition
MAX_REDIRECTS = 3


def system_resolver(host: str, port: int) -> list[str]:
    """What the OS resolver answers for `host`, in its order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as e:  # a label IDNA cannot encode (too long, say): no such name
        raise OSError(f"not a resolvable name: {e}") from None
    return [str(info[4][0]) for info in infos]


def _kind(ip: IPAddress) -> str:
    """Why `ip` itself is not a destination ("" when it is globally routable)."""
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "shared address space 100.64.0.0/10"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local"
    if ip.is_private:
        return "private or special-purpose"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return ""


def _carried(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address carries, and the form that carries it: traffic to these reaches that
    IPv4 address (through the host's own stack, a relay or a NAT64 gateway)."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.teredo is not None:
        return "Teredo", ip.teredo[1]
    if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d, deprecated IPv4-compatible (:: and ::1 are themselves)
        return "IPv4-compatible", ipaddress.IPv4Address(int(ip))
    return None


def refusal(ip: IPAddress, allowed: Sequence[Network] = ()) -> str:
    """Why the guard will not connect to `ip` ("" when it will)."""
    if any(ip in net for net in allowed):
        return ""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return "local-use NAT64 64:ff9b:1::/48"
        carried = _carried(ip)
        if carried is not None:
            form, inner = carried
            why = refusal(inner, allowed)
            if why:
                return f"{form} for {inner}: {why}"
            if form in ("Teredo", "IPv4-compatible"):  # not global (IANA), deprecated: never a destination
                return f"{form} for {inner}"
            # IPv4-mapped, 6to4 and NAT64 reach the IPv4 address they carry: that is the destination judged
            # (not the wrapper, which Python versions classify differently).
            return ""
    return _kind(ip)


def _literal(host: str) -> tuple[IPAddress, bool] | None:
    """The address `host` is, read as the OS reads it (True when it is a non-canonical numeric form), or None
    for a name."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare), False
    except ValueError:
        pass
    if ":" in bare:
        raise OutboundRefused(f"{host!r} is not an IP address")
    try:  # decimal, octal, hex and short forms: what getaddrinfo (inet_aton) turns them into
        return ipaddress.IPv4Address(socket.inet_aton(bare)), True
    except OSError:
        return None


def parse_url(url: str) -> httpx.URL:
    """`url` as httpx (the client that sends it) reads it; OutboundRefused unless it is http(s) with a host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        raise OutboundRefused(f"not a valid URL: {e}") from None
    if parsed.scheme not in ("http", "https"):
        raise OutboundRefused(f"scheme {parsed.scheme!r} is not http or https")
    if not parsed.host:
        raise OutboundRefused("the URL has no host")
    return parsed


class OutboundGuard:
    """The check for caller-supplied destinations. `allow_networks` lets an operator open specific non-global
    networks (an internal webhook range, loopback in tests); `resolver` is the name lookup (the OS's unless a
    test gives its own)."""

    def __init__(self, *, allow_networks: Iterable[str] = (), resolver: Resolver = system_resolver) -> None:
        self.allowed: tuple[Network, ...] = tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks)
        self._resolve = resolver

    def addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for `host`, every one of them checked. OutboundRefused names the first
        refused one; OSError when the name does not resolve."""
        if not host:
            raise OutboundRefused("the URL has no host")
        literal = _literal(host)
        if literal is not None:
            ip, numeric = literal
            why = refusal(ip, self.allowed)
            if why:
                shown = f"{host} reads as {ip}, which" if numeric else host.strip("[]")
                raise OutboundRefused(f"{shown} is not globally routable ({why})")
            return [str(ip) if numeric else host.strip("[]")]
        found = list(self._resolve(host, port))
        if not found:
            raise OSError(f"{host} has no address")
        for address in found:
            try:
                ip = ipaddress.ip_address(address.split("%", 1)[0])
            except ValueError:
                raise OutboundRefused(f"{host} resolves to {address!r}, not an IP address") from None
            why = refusal(ip, self.allowed)
            if why:
                raise OutboundRefused(f"{host} resolves to {ip}, which is not globally routable ({why})")
        return found

    def check_url(self, url: str) -> list[str]:
        """Check a caller's URL before accepting it: scheme, host and every address it resolves to now.
        OutboundRefused (a 400) says why not. The connection checks again when it is made."""
        parsed = parse_url(url)
        host = parsed.raw_host.decode("ascii")  # the host the connection will use (IDNA-encoded, no brackets)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            return self.addresses(host, port)
        except OSError as e:
            raise OutboundRefused(f"cannot resolve {host}: {e.strerror or e}") from None

    def client(self, *, timeout: float, ssl_context: ssl.SSLContext | None = None) -> httpx.Client:
        """An httpx client whose every connection passes the guard. No proxies from the environment (a proxy
        would resolve the name itself) and no automatic redirects (`post_json` follows them, checked)."""
        transport = GuardedTransport(self, ssl_context=ssl_context)
        return httpx.Client(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)


class _PinnedBackend(httpcore.NetworkBackend):
    """Opens TCP connections only to addresses the guard checked, resolving the name itself, once."""

    def __init__(self, guard: OutboundGuard) -> None:
        self._guard = guard
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self._guard.addresses(host, port)
        except OutboundRefused as e:
            log.warning("outbound connection to %s:%s refused: %s", host, port, e.message)
            raise
        except OSError as e:
            raise httpcore.ConnectError(f"cannot resolve {host}: {e.strerror or e}") from None
        error: Exception = httpcore.ConnectError(f"cannot connect to {host}")
        for address in addresses:  # each one checked above; the IP literal means no second lookup
            try:
                return self._tcp.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                error = e
        raise error

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.NetworkStream:
        raise OutboundRefused("unix sockets are not an outbound destination")

    def sleep(self, seconds: float) -> None:
        self._tcp.sleep(seconds)


# httpcore's errors as httpx's (the same names; the most specific first), so callers handle httpx.HTTPError.
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except Exception as e:
        for core, mapped in _ERRORS:
            if isinstance(e, core):
                raise mapped(str(e), request=request) from e
        raise


class _Body(httpx.SyncByteStream):
    def __init__(self, response: httpcore.Response, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx(self._request):
            yield from self._response.iter_stream()

    def close(self) -> None:
        self._response.close()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool whose network backend is the guard (httpcore's public hook;
    httpx's own transport does not expose one)."""

    def __init__(self, guard: OutboundGuard, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
            max_connections=20,
            keepalive_expiry=30.0,
            network_backend=_PinnedBackend(guard),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, httpx.SyncByteStream):
            raise TypeError("GuardedTransport sends synchronous requests only")
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx(request):
            response = self._pool.handle_request(core)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response, request),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


def post_json(client: httpx.Client, url: str, body: Any, *, max_redirects: int = MAX_REDIRECTS) -> int:
    """POST `body` as JSON and answer the final status, following up to `max_redirects` redirects: each hop
    connects through the client's guard, so a redirect to a refused address is refused like the URL itself.
    The response body is never read (a receiver cannot make us buffer it)."""
    request = client.build_request("POST", parse_url(url), json=body)
    for hop in range(max_redirects + 1):
        try:
            response = client.send(request, stream=True)
        except OutboundRefused as e:
            if hop == 0:
                raise
            raise OutboundRefused(f"redirect to {request.url}: {e.message}") from None
        response.close()
        if response.next_request is None or hop == max_redirects:
            return response.status_code
        request = response.next_request
    raise AssertionError("unreachable")
