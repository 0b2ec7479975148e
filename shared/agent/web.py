"""`web_fetch`'s outbound guard: the server's own (shared/outbound.py), so the model cannot reach what only this
machine can (the mesh's `/health` and control plane, other loopback services, the LAN, a cloud's metadata).

Each hop, the first request and every redirect alike, is checked before it connects: loopback, link-local,
private, shared, multicast and reserved addresses are refused, the name is resolved once and the connection
pinned to the checked addresses (no DNS rebinding), no proxy from the environment is used. `web_fetch.allow`
(the user's config, or a trusted project's) opens exceptions: `host` or `host:port` (matched against the URL as
written) or an address range (`10.0.0.0/8`, `127.0.0.1`). The mesh's own address is refused even when an entry
would allow it."""

from __future__ import annotations

import html
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MESH_ITSELF", "AllowEntry", "WebAccess", "fetch", "parse_allow"]

MESH_ITSELF = "is the mesh itself, which web_fetch never fetches"
MAX_BYTES = 2_000_000
MAX_REDIRECTS = 5
_TAGS = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S | re.I)


@dataclass(frozen=True)
class AllowEntry:
    host: str = ""  # lower-case, no brackets; "" for a range
    port: int | None = None  # None: any port
    network: str = ""  # a CIDR range


def parse_allow(entry: str) -> AllowEntry:
    """One `web_fetch.allow` entry; ValueError when it is none of host, host:port, [v6]:port or a range."""
    try:
        return AllowEntry(network=str(ipaddress.ip_network(entry, strict=False)))
    except ValueError:
        pass
    host, port = entry, ""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(entry)
        port = rest[1:]
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(entry)
    if not re.fullmatch(r"[A-Za-z0-9.-]+|[0-9A-Fa-f:.]+", host):
        raise ValueError(entry)
    return AllowEntry(host=host.lower(), port=int(port) if port else None)


@dataclass(frozen=True)
class WebAccess:
    """Where web_fetch may go beyond the public internet, and where never (the mesh)."""

    allow: tuple[AllowEntry, ...] = ()
    mesh_url: str = ""

    @classmethod
    def from_config(cls, entries: Sequence[str], mesh_url: str) -> WebAccess:
        return cls(tuple(parse_allow(e) for e in entries), mesh_url)

    def _hosts_allowed(self, host: str, port: int) -> bool:
        return any(e.host == host and e.port in (None, port) for e in self.allow if e.host)

    def _networks(self) -> list[str]:
        return [e.network for e in self.allow if e.network]


def _origin(url: str) -> tuple[str, int]:
    import httpx

    parsed = httpx.URL(url)
    return parsed.host.lower(), parsed.port or (443 if parsed.scheme == "https" else 80)


def _hop(access: WebAccess, url: str) -> tuple[str, int, list[str]]:
    """Check one hop's URL: (host, port, the networks its guard allows). OutboundRefused says why not."""
    from flux7.shared.errors import OutboundRefused
    from flux7.shared.outbound import parse_url

    parsed = parse_url(url)
    host, port = parsed.host.lower(), parsed.port or (443 if parsed.scheme == "https" else 80)
    if access.mesh_url and (host, port) == _origin(access.mesh_url):
        raise OutboundRefused(f"{host}:{port} {MESH_ITSELF}")
    if access._hosts_allowed(host, port):
        return host, port, ["0.0.0.0/0", "::/0"]  # allowed by name: any address it resolves to
    return host, port, access._networks()


def fetch(access: WebAccess, url: str, *, timeout: float = 30.0) -> tuple[int, str, str, str]:
    """GET `url` through the guard, following redirects one checked hop at a time: (status, content type, text,
    the final URL). Raises OutboundRefused for a refused destination (the first URL or a redirect), httpx errors
    for the rest. Synchronous: run it in a thread."""
    from flux7.shared.errors import OutboundRefused
    from flux7.shared.outbound import OutboundGuard

    current = url
    for hop in range(MAX_REDIRECTS + 1):
        try:
            _, _, networks = _hop(access, current)
            guard = OutboundGuard(allow_networks=networks)
            with guard.client(timeout=timeout) as client:
                request = client.build_request("GET", current, headers={"User-Agent": "flux7-agent"})
                response = client.send(request, stream=True)
                try:
                    if response.next_request is not None and hop < MAX_REDIRECTS:
                        current = str(response.next_request.url)
                        continue
                    body = b""
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > MAX_BYTES:
                            break
                finally:
                    response.close()
        except OutboundRefused as e:
            if hop == 0:
                raise
            raise OutboundRefused(f"redirect to {current}: {e.message}") from None
        kind = response.headers.get("content-type", "")
        text = body[:MAX_BYTES].decode(response.encoding or "utf-8", "replace")
        if "html" in kind:
            text = html.unescape(_TAGS.sub(" ", text))
            text = "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
        return response.status_code, kind, text, current
    raise OutboundRefused(f"more than {MAX_REDIRECTS} redirects")
