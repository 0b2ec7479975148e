"""Fixtures: a Tracer over a real SQLite file and a real trace file, and a loopback OTLP/HTTP collector."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.settings import Settings, load_settings
from flux7.shared.store.db import Database
from flux7.shared.tracing import Tracer


def make_settings(tmp: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "storage_path": str(tmp / "flux7.db"),
        "trace_file": str(tmp / "traces.jsonl"),
        "auth": {"open_loopback": True},  # no generated admin token file beside these databases
    }
    values.update(overrides)
    env = {"MESH_TRACE_KEY": values.pop("trace_key")} if "trace_key" in values else {}
    return load_settings(None, env=env, **values)


@pytest.fixture
def db(store: Database) -> Database:
    return store


@pytest.fixture
def tracer(tmp_path: Path, db: Database) -> Tracer:
    return Tracer(make_settings(tmp_path), db)


class Collector:
    """A real OTLP/HTTP collector on 127.0.0.1: records each POST and answers the scripted statuses in order
    (then 200)."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.attempts = 0
        self.cond = threading.Condition()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with collector.cond:
                    collector.attempts += 1
                    status = collector.statuses.pop(0) if collector.statuses else 200
                    if status == 200:
                        collector.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    collector.cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout=timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()
