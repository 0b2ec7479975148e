"""`flux7 serve` as a real granian process on loopback, for tests where the process is the point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.http import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill9(self) -> None:
        """SIGKILL the whole process group (granian's main process and its workers), no shutdown hooks."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def healthy(url: str) -> bool:
    """`GET /health` answers 200."""
    try:
        return httpx.get(f"{url}/health", timeout=1.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(
    config: Path,
    *,
    workers: int = 1,
    port: int | None = None,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Server:
    port = port or free_port()
    log = config.parent / f"server-{port}.log"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(config)),
            *("--port", str(port), "--workers", str(workers), *(extra or [])),
        ],
        cwd=config.parent,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    server = Server(proc, port, log)
    wait_until(lambda: proc.poll() is not None or healthy(server.url), timeout=60)
    if proc.poll() is not None:
        raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()}")
    return server


def stop_server(server: Server) -> None:
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(5)


@contextmanager
def running_server(
    config: Path, *, workers: int = 1, port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[Server]:
    server = start_server(config, workers=workers, port=port, env=env)
    try:
        yield server
    finally:
        stop_server(server)
