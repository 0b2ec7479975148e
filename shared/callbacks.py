"""Approval notifications (CONTRACT 1.8): the operator's `notify_url` webhook and the agent's
`X-Callback-URL`.

The callback URL comes from the caller, so it passes an SSRF guard: the host is resolved once, every
address must be public, and the request goes to that validated address (a second lookup could answer
differently). Redirects are not followed. Deliveries run on a small thread pool: a slow receiver never
delays a decision."""

from __future__ import annotations

import collections
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec

__all__ = ["CallbackRefused", "Delivery", "Notifier", "resolve_public"]

log = logging.getLogger("flux7.callbacks")


class CallbackRefused(ValueError):
    """A callback URL that the SSRF guard will not call."""


class Delivery(msgspec.Struct, frozen=True):
    url: str
    event: str
    outcome: str  # "delivered <status>" | "refused: <why>" | "failed: <why>"
    at: float


def _blocked(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return _blocked(ip.ipv4_mapped)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_private:
        return "private"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return "non-routable"
    return ""


def resolve_public(url: str, *, resolver: Callable[..., Any] = socket.getaddrinfo) -> str:
    """The one public address to send to, or CallbackRefused. Every address the name resolves to must be
    public,
    so a name with one private record among public ones is refused too."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise CallbackRefused(f"scheme {parts.scheme!r} is not http or https")
    host = parts.hostname or ""
    if not host:
        raise CallbackRefused("no host")
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        raise CallbackRefused("localhost")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise CallbackRefused(f"bad port: {e}") from None
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise CallbackRefused(f"cannot resolve {host}: {e}") from None
    addresses = [str(info[4][0]).split("%")[0] for info in infos]
    if not addresses:
        raise CallbackRefused(f"cannot resolve {host}")
    for address in addresses:
        why = _blocked(ipaddress.ip_address(address))
        if why:
            raise CallbackRefused(f"{host} resolves to a {why} address ({address})")
    return addresses[0]


def _pinned(url: str, address: str) -> tuple[str, str]:
    """The URL with its host replaced by the validated address, and the original Host header value."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    original = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), original


class Notifier:
    def __init__(self, *, timeout: float = 5.0, workers: int = 4) -> None:
        self._timeout = timeout
        self._client_lock = threading.Lock()
        self._http: httpx.Client | None = None  # built on first use: it costs an SSL context at start
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flux7-callback")
        self._done = threading.Condition()
        self.recent: collections.deque[Delivery] = collections.deque(maxlen=200)

    @property
    def _client(self) -> httpx.Client:
        with self._client_lock:
            if self._http is None:
                self._http = httpx.Client(timeout=self._timeout, follow_redirects=False)
            return self._http

    def deliver(self, url: str, body: dict[str, Any], *, guard: bool) -> Delivery:
        """POST the body now. `guard` applies the SSRF guard (caller-supplied URLs); an operator's URL
        skips it."""
        event = str(body.get("event", ""))
        try:
            if guard:
                address = resolve_public(url)
                target, host = _pinned(url, address)
                extensions = {"sni_hostname": urlsplit(url).hostname or ""} if url.startswith("https") else {}
                resp = self._client.post(target, json=body, headers={"Host": host}, extensions=extensions)
            else:
                resp = self._client.post(url, json=body)
            outcome = f"delivered {resp.status_code}"
        except CallbackRefused as e:
            outcome = f"refused: {e}"
            log.warning("callback to %s refused: %s", url, e)
        except httpx.HTTPError as e:
            outcome = f"failed: {e.__class__.__name__}: {e}"
            log.warning("callback to %s failed: %s", url, e)
        delivery = Delivery(url=url, event=event, outcome=outcome, at=time.time())
        with self._done:
            self.recent.append(delivery)
            self._done.notify_all()
        return delivery

    def send(self, url: str, body: dict[str, Any], *, guard: bool) -> Future[Delivery] | None:
        if not url:
            return None
        try:
            return self._pool.submit(self.deliver, url, body, guard=guard)
        except RuntimeError:  # shut down
            return None

    def wait_for(self, predicate: Callable[[Delivery], bool], timeout: float) -> Delivery | None:
        """The first recorded delivery matching `predicate`, waiting up to `timeout` for it."""
        deadline = time.monotonic() + timeout
        with self._done:
            while True:
                for d in self.recent:
                    if predicate(d):
                        return d
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._done.wait(left)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._http is not None:
            self._http.close()
