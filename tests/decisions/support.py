"""Helpers shared by the decision and supervisor tests: an ASGI app on a loopback port, waiting on a condition,
a memory service on a temp dir."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.service import MemoryService
from flux7.shared.store.db import Database
from tests.support.http import free_port, wait_until
from tests.support.server import REPO
from tests.support.waiting import eventually


def new_memory_service(directory: Path, db: Database | None = None) -> MemoryService:
    """The memory role on `db` (else its own SQLite file) and a workspace (no embeddings: lists and tags only)."""
    return MemoryService(MemoryConfig(dir=str(directory / "mem"), hybrid=False), db or Database(directory / "mem.db"))


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[str]:
    """An ASGI app on a real loopback port (granian, embedded in this loop). Yields its base URL."""
    from granian.constants import Interfaces
    from granian.server.embed import Server

    port = free_port()
    server = Server(app, address="127.0.0.1", port=port, interface=Interfaces.ASGI, log_enabled=False)
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"

    async def up() -> bool:
        async with httpx.AsyncClient() as c:
            try:
                await c.get(url + "/")
                return True
            except httpx.TransportError:
                return False  # still binding

    try:
        await eventually(up, 15, f"{url} to answer")
        yield url
    finally:
        server.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    await eventually(predicate, timeout)


async def _value(v: Any) -> Any:
    return await v if asyncio.iscoroutine(v) else v


class Mem7:
    """`mem7 serve` as its own process on a fixed loopback port, so it can be killed and started again."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Mem7:
        env = {**os.environ, "MEM7_DIR": str(self.directory), "MEM7_HYBRID": "0", "PYTHONPATH": str(REPO)}
        env.pop("MEM7_TOKEN", None)
        log = (self.directory.parent / f"mem7-{self.port}.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from flux7.functions.entry import mem7_main; raise SystemExit(mem7_main())",
                "serve",
                "--listen",
                f"127.0.0.1:{self.port}",
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        wait_until(lambda: self.proc is not None and (self.proc.poll() is not None or self.healthy()), timeout=30)
        assert self.proc.poll() is None, (self.directory.parent / f"mem7-{self.port}.log").read_text()
        return self

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()


def rpc_tool(url: str, name: str, arguments: dict[str, Any]) -> str:
    """One memory tool over mem7's /rpc, as the seed curl of the docs does."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    reply = httpx.post(f"{url}/rpc", json=body, timeout=10, trust_env=False).json()
    return str(reply["result"]["content"][0]["text"])
