"""The ASGI app: every endpoint family's routes over one Mesh."""

from __future__ import annotations

import importlib
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig

from shared.mesh import Mesh

from .errors import EXCEPTION_HANDLERS

__all__ = ["create_app"]

# Each module exports ROUTES (a list of Litestar route handlers). Add a family here when it lands.
_ROUTE_MODULES = (
    "functions.health",
    "functions.tools",
    "functions.policies",
    "functions.traces",
    "functions.metrics",
    "functions.approvals",
    "functions.precedents",
    "functions.grants",
    "functions.halts",
)


def create_app(mesh: Mesh) -> Litestar:
    handlers: list[Any] = []
    for name in _ROUTE_MODULES:
        handlers.extend(importlib.import_module(name).ROUTES)
    origins = list(mesh.settings.console.allowed_origins)
    cors = CORSConfig(allow_origins=origins, allow_headers=["*"], allow_methods=["*"]) if origins else None

    async def _start() -> None:
        await mesh.start()

    async def _stop() -> None:
        await mesh.stop()

    app = Litestar(
        route_handlers=handlers,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        on_startup=[_start],
        on_shutdown=[_stop],
        request_max_body_size=mesh.settings.max_body_bytes,
        cors_config=cors,
        openapi_config=None,
        debug=False,
    )
    app.state.mesh = mesh
    return app
