"""Fixtures: a Mesh over a real SQLite file (a PostgreSQL database with `--engine=postgresql`), a second Mesh on
the same database (another worker's view), and an HTTP client over the ASGI app from a loopback peer (the control
plane's open case, DESIGN 6)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import Settings, load_settings

ECHO_POLICY = {
    "name": "gate",
    "agent": "*",
    "rules": [
        {"tools": ["echo.run"], "action": "human_approval"},
        {"tools": ["*"], "action": "allow"},
    ],
}


def make_settings(tmp: Path, **overrides: Any) -> Settings:
    # The memory role (and its decision writer) is another component's subject; off here, so these tests
    # exercise the approval machinery alone.
    # auth.open_loopback: the control plane trusts loopback peers, as these tests exercise the queue (the admin
    # token file is tests/functions/test_browser_guard.py's and tests/auth/test_admin_token.py's subject).
    values: dict[str, Any] = {
        "storage_path": str(tmp / "flux7.db"),
        "memory": {"enabled": False},
        "auth": {"open_loopback": True},
    }
    values.update(overrides)
    return load_settings(None, env={}, **values)


@pytest.fixture(autouse=True)
def _server_processes_share_the_engine(engine_env: str) -> str:
    """Server processes (tests/gate/servers.py) use this test's PostgreSQL database too."""
    return engine_env


@pytest.fixture
def mesh_of(tmp_path: Path, database_url: str) -> Iterator[Callable[..., Mesh]]:
    """Build Meshes over tmp_path/flux7.db (or the test's PostgreSQL database, `--engine=postgresql`); each one
    is a separate worker's view of the same database."""
    made: list[Mesh] = []

    def make(**overrides: Any) -> Mesh:
        m = Mesh(make_settings(tmp_path, **({"database": database_url} if database_url else {}), **overrides))
        made.append(m)
        return m

    yield make
    for m in made:
        m.db.close()


@pytest.fixture
def mesh(mesh_of: Callable[..., Mesh]) -> Mesh:
    return mesh_of()


def echo_settings() -> dict[str, Any]:
    """A real CLI tool (/bin/echo) gated by human_approval, for calls through POST /tool."""
    return {"cli_tools": [{"name": "echo", "bin": "/bin/echo", "bare": {}}], "policies": [ECHO_POLICY]}


@pytest.fixture
async def client_of() -> AsyncIterator[Callable[..., Any]]:
    """`await client_of(mesh)`: an httpx client over the app, calling from 127.0.0.1, with the mesh started."""
    opened: list[tuple[Mesh, httpx.AsyncClient]] = []

    async def make(m: Mesh, peer: str = "127.0.0.1", **headers: str) -> httpx.AsyncClient:
        await m.start()
        transport = httpx.ASGITransport(create_app(m), client=(peer, 40000))
        c = httpx.AsyncClient(transport=transport, base_url="http://mesh", headers=headers, timeout=30)
        opened.append((m, c))
        return c

    yield make
    for m, c in opened:
        await c.aclose()
        await m.stop()


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    """Server processes a test starts (tests/gate/servers.py); stopped at teardown."""
    started: list[Any] = []
    yield started
    for s in started:
        s.stop()
