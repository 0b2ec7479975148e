"""Helpers shared by the decision and supervisor tests: an ASGI app on a loopback port, waiting on a condition,
a memory service on a temp dir."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from shared.db import Database
from shared.memory.config import MemoryConfig
from shared.memory.service import MemoryService
from tests.support.http import free_port


def new_memory_service(directory: Path) -> MemoryService:
    """The memory role on its own SQLite file and workspace (no embeddings: lists and tags only)."""
    return MemoryService(MemoryConfig(dir=str(directory / "mem"), hybrid=False), Database(directory / "mem.db"))


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[str]:
    """An ASGI app on a real loopback port (granian, embedded in this loop). Yields its base URL."""
    from granian.constants import Interfaces
    from granian.server.embed import Server

    port = free_port()
    server = Server(app, address="127.0.0.1", port=port, interface=Interfaces.ASGI, log_enabled=False)
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"

    async def up() -> None:
        async with httpx.AsyncClient() as c:
            while True:
                try:
                    await c.get(url + "/")
                    return
                except httpx.TransportError:
                    await asyncio.sleep(0.02)  # polling interval while the server binds

    try:
        await asyncio.wait_for(up(), 15)
        yield url
    finally:
        server.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    async def poll() -> None:
        while not await _value(predicate()):
            await asyncio.sleep(0.01)  # polling interval, not a wait for time to pass

    await asyncio.wait_for(poll(), timeout)


async def _value(v: Any) -> Any:
    return await v if asyncio.iscoroutine(v) else v
