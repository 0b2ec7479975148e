"""Small real HTTP servers on loopback for tests: a JWKS endpoint, a JSON backend, a webhook sink."""

from __future__ import annotations

import json
import os
import random
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.waiting import wait_until

__all__ = ["free_port", "serve_json", "wait_until"]

# (status, json_body) or (status, json_body, extra_headers)
Handler = Callable[[str, str, dict[str, str], bytes], tuple[Any, ...]]


# Ports a test hands to a server it starts. bind(0) would choose from the kernel's ephemeral range, where, between
# closing the probe and the server binding, another xdist worker's bind(0) or any outgoing connection may take the
# same port. So each worker takes ports in turn from its own block below that range (32768-60999 on Linux),
# from a random start (two runs side by side rarely meet), skipping any port in use.
_BLOCK_START, _BLOCK_SIZE, _BLOCKS = 20_000, 1_500, 8
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
_block = int(_worker) % _BLOCKS if _worker.isdigit() else 0
_next_offset = random.randrange(_BLOCK_SIZE)
_port_lock = threading.Lock()


def free_port() -> int:
    """A loopback port nothing listens on, which no other test worker will be handed."""
    global _next_offset
    with _port_lock:
        for _ in range(_BLOCK_SIZE):
            port = _BLOCK_START + _block * _BLOCK_SIZE + _next_offset
            _next_offset = (_next_offset + 1) % _BLOCK_SIZE
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue  # in use (or lingering): the next one
                return port
    raise RuntimeError(f"no free port in this worker's block {_block}")


@contextmanager
def serve_json(
    handler: Handler, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Run `handler(method, path, headers, body) -> (status, json_body[, headers])` on a loopback address
    (`host`, any of 127/8; `port` 0 for a free one), over TLS with a server context `tls`.

    Yields (base_url, requests_seen)."""
    seen: list[dict[str, Any]] = []

    class _H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.append({"method": self.command, "path": self.path, "headers": headers, "body": body})
            status, payload, *extra = handler(self.command, self.path, headers, body)
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), _H)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://{host}:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
