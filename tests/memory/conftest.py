"""Memory tests: a real store on real SQLite (or PostgreSQL, `--engine=postgresql`) and files; real `mem7 serve`
processes on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.service import MemoryService
from flux7.shared.store.db import Database
from tests.memory.stores import Stores
from tests.support.http import free_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
T0 = 1_790_000_000  # 2026-09-21T14:13:20Z: a fixed clock start for in-process tests


class Clock:
    """A clock the test moves: TTL and bitemporal tests need time to pass without waiting for it."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def eventually(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll until `check()` is truthy; fail after `timeout` seconds."""
    return wait_until(check, timeout, what)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="session")
def stores(engine: str, request: pytest.FixtureRequest) -> Iterator[Stores]:
    """Each memory directory's index: `<dir>/index.db`, or a PostgreSQL database of its own (dropped at the end
    of the session, so a module-scoped `mem7 serve` can have one too)."""
    made = Stores(engine, request)
    yield made
    made.close()


@pytest.fixture
def make_service(tmp_path: Path, clock: Clock, stores: Stores) -> Iterator[Callable[..., MemoryService]]:
    made: list[MemoryService] = []

    def make(directory: Path | None = None, **config: Any) -> MemoryService:
        root = directory or tmp_path / "mem7"
        config.setdefault("hybrid", False)
        service = MemoryService(MemoryConfig(dir=str(root), **config), Database(stores.target(root)), clock=clock)
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


@pytest.fixture
def service(make_service: Callable[..., MemoryService]) -> MemoryService:
    return make_service()


def call(service: MemoryService, tool: str, **arguments: Any) -> str:
    """A tool that must succeed: its text."""
    text, is_error = service.call_tool(tool, arguments)
    assert not is_error, text
    return text


def fail(service: MemoryService, tool: str, **arguments: Any) -> str:
    """A tool that must fail: its error text."""
    text, is_error = service.call_tool(tool, arguments)
    assert is_error, text
    return text


class Mem7Process:
    """`mem7 serve` (granian) on a free loopback port, in its own process group."""

    def __init__(self, directory: Path, *, token: str = "", workers: int = 1, env: dict[str, str] | None = None):
        self.directory = directory
        self.token = token
        self.workers = workers
        self.extra_env = env or {}
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Mem7Process:
        self.port = free_port()
        env = {**os.environ, "MEM7_DIR": str(self.directory), "MEM7_HYBRID": "0", **self.extra_env}
        env.pop("MEM7_TOKEN", None)
        args = [
            sys.executable,
            "-c",
            "from flux7.functions.entry import mem7_main; raise SystemExit(mem7_main())",
            "serve",
            "--listen",
            f"127.0.0.1:{self.port}",
        ]
        args += ["--workers", str(self.workers)]
        if self.token:
            args += ["--token", self.token]
        self.log = (self.directory.parent / f"mem7-{self.port}.log").open("wb")
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=self.log, stderr=self.log, start_new_session=True)
        eventually(self.healthy, timeout=30, what=f"mem7 serve on {self.url}")
        return self

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"mem7 serve exited: {(self.directory.parent / f'mem7-{self.port}.log').read_text()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=15)
        self.log.close()

    def __enter__(self) -> Mem7Process:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill(signal.SIGTERM)
