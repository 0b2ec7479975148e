"""LISTEN/NOTIFY for the PostgreSQL engine: what one instance changes, every other hears about at once.

A resolution or a stop sends `pg_notify` inside its write transaction, so PostgreSQL delivers it at commit and
never for a rolled-back change. Each process keeps one listening connection in a daemon thread and hands every
notification to the handlers subscribed to its channel. The listener can drop (a restart of the server, a
network cut): `connected` says so, the callers fall back to polling meanwhile, and on reconnecting every handler
is called with RECONNECTED, since what was sent while nobody listened is lost."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import psycopg

__all__ = ["CHANNELS", "RECONNECTED", "Listener"]

log = logging.getLogger("flux7.store.notify")

# Every channel a flux7 deployment uses; one LISTEN each on connecting.
CHANNELS = ("flux7_approvals", "flux7_halts")
# The payload handlers get after a (re)connection: anything may have changed meanwhile.
RECONNECTED = "*"
RETRY_S = 1.0  # between attempts to reconnect
WAIT_S = 1.0  # the longest the thread blocks before looking at its stop flag


class Listener:
    """One process's listening connection, started on the first subscription."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._handlers: dict[str, list[Callable[[str], None]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()  # a forked child has no thread of its parent's: it starts its own
        self.connected = threading.Event()

    @property
    def alive(self) -> bool:
        """Listening now, in this process."""
        return self._pid == os.getpid() and self.connected.is_set()

    def subscribe(self, channel: str, handler: Callable[[str], None]) -> None:
        if channel not in CHANNELS:
            raise ValueError(f"not a flux7 channel: {channel!r}")
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._thread, self.connected = os.getpid(), None, threading.Event()
            self._handlers.setdefault(channel, []).append(handler)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="flux7-pg-listener", daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(WAIT_S + 1.0)

    def _dispatch(self, channel: str, payload: str) -> None:
        with self._lock:
            handlers = list(self._handlers.get(channel, ()))
        for handler in handlers:
            try:
                handler(payload)
            except Exception:  # one handler's fault never stops the others or the listener
                log.exception("notification handler failed on %s", channel)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True) as conn:
                    for channel in CHANNELS:
                        conn.execute(f"LISTEN {channel}")
                    self.connected.set()
                    for channel in CHANNELS:
                        self._dispatch(channel, RECONNECTED)
                    self._listen(conn)
            except Exception as e:
                if not self._stop.is_set():
                    log.warning("PostgreSQL listener lost (%s); polling until it is back", e)
            finally:
                self.connected.clear()
            self._stop.wait(RETRY_S)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        while not self._stop.is_set():
            for note in conn.notifies(timeout=WAIT_S):
                self._dispatch(note.channel, note.payload)
