"""Fixtures: Meshes over a real SQLite file whose notification workers are stopped at teardown, and server
processes (tests/gate/servers.py) stopped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.mesh import Mesh
from tests.gate.conftest import make_settings


@pytest.fixture
def mesh_of(tmp_path: Path, database_url: str) -> Iterator[Callable[..., Mesh]]:
    """`mesh_of(**settings)`: a Mesh over tmp_path/flux7.db (a PostgreSQL database with `--engine=postgresql`);
    each one is another worker's view of that database."""
    made: list[Mesh] = []

    def make(**overrides: Any) -> Mesh:
        m = Mesh(make_settings(tmp_path, **({"database": database_url} if database_url else {}), **overrides))
        made.append(m)
        return m

    yield make
    for m in made:
        if m.notifications is not None:
            m.notifications.stop()
        m.db.close()


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for s in started:
        s.stop()
