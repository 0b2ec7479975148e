"""Real server processes for the tests: `granian --workers N` over flux7.functions.asgi:app_factory on loopback."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.http import free_port, wait_until

from .conftest import echo_settings

AGENT = {"Authorization": "Bearer agent:bot"}
GRANIAN = [sys.executable, "-m", "granian"]


def write_config(tmp: Path, **extra: Any) -> Path:
    config = {
        "storage_path": str(tmp / "flux7.db"),
        "memory": {"enabled": False},
        "auth": {"open_loopback": True},  # the queue's subject, not the admin token's
        **echo_settings(),
        **extra,
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Server:
    """`granian --workers N` over flux7.functions.asgi:app_factory, in its own process group (so kill -9 takes the
    workers too)."""

    def __init__(self, config: Path, workers: int = 2) -> None:
        self.config = config
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = config.with_name(f"server-{self.port}.log")

    def start(self) -> Server:
        env = {**os.environ, "FLUX7_CONFIG": str(self.config)}
        env.pop("MESH_ADMIN_TOKEN", None)
        cmd = [
            *GRANIAN,
            "--interface",
            "asgi",
            "--workers",
            str(self.workers),
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "flux7.functions.asgi:app_factory",
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path(__file__).resolve().parents[2],
            )
        wait_until(self._ready, timeout=60)
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def pending(url: str, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def enough() -> bool:
        found[:] = httpx.get(f"{url}/approvals", timeout=5).json()
        return len(found) >= count

    wait_until(enough, timeout=20)
    return found


def blocked_call(url: str, arg: str, **headers: str) -> concurrent.futures.Future[httpx.Response]:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(
        httpx.post, f"{url}/tool/echo.run", json={"args": [arg]}, headers={**AGENT, **headers}, timeout=60
    )
    pool.shutdown(wait=False)
    return future
