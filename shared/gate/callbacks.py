"""Approval callbacks (CONTRACT 1.8): the agent's `X-Callback-URL`. (The operator's `notify_url` webhook is signed
and delivered from a durable outbox: shared/notify/.)

The callback URL comes from the caller, so it goes through the outbound guard (shared/outbound.py): only
globally routable addresses (or networks the operator allowed), resolved once and connected to as checked,
each redirect checked again. An operator's URL (`guard=False`) is trusted. Deliveries run on a small thread pool:
a slow receiver never delays a decision."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import msgspec

from flux7.shared.errors import OutboundRefused
from flux7.shared.outbound import OutboundGuard, post_json

__all__ = ["Delivery", "Notifier"]

log = logging.getLogger("flux7.callbacks")


class Delivery(msgspec.Struct, frozen=True):
    url: str
    event: str
    outcome: str  # "delivered <status>" | "refused: <why>" | "failed: <why>"
    at: float


class Notifier:
    def __init__(self, *, guard: OutboundGuard | None = None, timeout: float = 5.0, workers: int = 4) -> None:
        self.guard = guard or OutboundGuard()
        self._timeout = timeout
        self._client_lock = threading.Lock()
        # built on first use (each costs an SSL context): the guarded one for callers' URLs, a plain one for
        # the operator's
        self._clients: dict[bool, httpx.Client] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flux7-callback")
        self._done = threading.Condition()
        self.recent: collections.deque[Delivery] = collections.deque(maxlen=200)

    def _client(self, guarded: bool) -> httpx.Client:
        with self._client_lock:
            client = self._clients.get(guarded)
            if client is None:
                if guarded:
                    client = self.guard.client(timeout=self._timeout)
                else:
                    client = httpx.Client(timeout=self._timeout, follow_redirects=False)
                self._clients[guarded] = client
            return client

    def deliver(self, url: str, body: dict[str, Any], *, guard: bool) -> Delivery:
        """POST the body now. `guard` sends through the outbound guard (caller-supplied URLs); an operator's
        URL skips it."""
        event = str(body.get("event", ""))
        try:
            if guard:
                status = post_json(self._client(True), url, body)
            else:
                status = self._client(False).post(url, json=body).status_code
            outcome = f"delivered {status}"
        except OutboundRefused as e:
            outcome = f"refused: {e.message}"
            log.warning("callback to %s refused: %s", url, e.message)
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
        with self._client_lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
