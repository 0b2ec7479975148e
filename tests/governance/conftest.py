"""`--engine=postgresql`: the governance tests' meshes and servers use this test's PostgreSQL database."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _every_mesh_shares_the_engine(engine_env: str) -> str:
    return engine_env
