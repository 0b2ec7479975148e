"""Liveness and build facts: GET /health, GET /version."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from flux7.functions.auth import mesh_of
from flux7.functions.openapi import PUBLIC
from flux7.functions.schemas import Health, Version
from flux7.shared import __version__
from flux7.shared.settings import config_id

__all__ = ["ROUTES"]


@get("/version", sync_to_thread=False, tags=["meta"], security=PUBLIC)
def version() -> Version:
    return Version(version=__version__, commit="none", date="unknown")


# In a thread: the database's write probe may wait a quarter of a second (shared/store/db.py write_blocked).
@get("/health", sync_to_thread=True, tags=["meta"], security=PUBLIC)
def health(request: Request[Any, Any, Any]) -> Health:
    mesh = mesh_of(request)
    return mesh.health(config_id(mesh.settings))


ROUTES = [health, version]
