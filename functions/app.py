"""The ASGI app: every endpoint family's routes over one Mesh."""

from __future__ import annotations

import gc
import importlib
import logging
from pathlib import Path
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig

from flux7.functions.conditional import conditional_get
from flux7.functions.console_assets import console_routes
from flux7.functions.csrf import browser_guard
from flux7.functions.errors import EXCEPTION_HANDLERS
from flux7.functions.fastpath import FastHandler, FastPaths
from flux7.functions.head import HeadAsGet
from flux7.functions.mcp import mcp_fast_path
from flux7.functions.openapi import openapi_config
from flux7.functions.raw_asgi import serve
from flux7.functions.tools import tool_fast_path
from flux7.shared.mesh import Mesh
from flux7.shared.paths import CONSOLE_DIST

__all__ = ["FAST_PATHS", "create_app"]

# Each module exports ROUTES (a list of Litestar route handlers). Add a family here when it lands.
_GC_GEN0 = 10_000  # allocations between young collections (CPython's default is 700)

_ROUTE_MODULES = (
    "flux7.functions.health",
    "flux7.functions.tools",
    "flux7.functions.policies",
    "flux7.functions.traces",
    "flux7.functions.metrics",
    "flux7.functions.approvals",
    "flux7.functions.precedents",
    "flux7.functions.grants",
    "flux7.functions.halts",
    "flux7.functions.mcp",
    "flux7.functions.pins",
    "flux7.functions.governance",
    "flux7.functions.memory",
    "flux7.functions.tokens",
    "flux7.functions.users",
    "flux7.functions.login",
    "flux7.functions.wellknown",
    "flux7.functions.integrations",
    "flux7.functions.notifications",
    "flux7.functions.oauth",
)

# The one table of the routes served ahead of Litestar (functions/fastpath.py), by both carriers: RSGI under
# `flux7 serve` (functions/rsgi.py), raw ASGI in process (`_App.__call__`). Each handler is its Litestar route's too.
FAST_PATHS: dict[tuple[str, str], FastHandler] = {
    ("POST", "/tool/{name}"): tool_fast_path,
    ("POST", "/mcp"): mcp_fast_path,
}


def _configure_logging() -> None:
    """flux7's own loggers at INFO on stderr; libraries' per-request chatter (httpx) at WARNING."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    logging.getLogger("flux7").setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _console_dist(mesh: Mesh) -> Path | None:
    configured = mesh.settings.console.dist_dir
    dist = mesh.settings.resolve_path(configured) if configured else CONSOLE_DIST
    return dist if (dist / "index.html").is_file() else None


class _App(HeadAsGet):
    """The Litestar app with its fast paths (functions/fastpath.py) served ahead of its routing."""

    fast: FastPaths

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            handler = self.fast.route(scope["method"], scope["path"])
            if handler is not None and await serve(self.fast, handler, scope, receive, send):
                return
        await super().__call__(scope, receive, send)


_gc_tuned = False


def _tune_gc() -> None:
    """Once per process, when the first app has started (in a granian worker: its lifespan). The objects alive
    then (modules, settings, caches, the registry) live as long as the worker; frozen, no collection walks them
    again, and a young generation of 10,000 lets the few surviving objects of each call pile up before one
    (issue 19). Measured in process, 12,000 calls at c=32: the collector's time per governed call fell from
    6.5 µs (REST) / 2.7 µs (MCP) to 1.7 / 0.8 µs with the freeze alone, and to 0 with the larger young
    generation (no collection ran); a full collection of the ~94,000 startup objects was an 80 ms pause.
    No collection before the freeze: it would put that pause (64 ms measured) on the cold start's path, before the
    first answer, and found no garbage there (measured: 0 unreachable objects once the app is built).
    Once only, so a process making many apps (the tests) does not freeze each one's garbage."""
    global _gc_tuned
    if _gc_tuned:
        return
    _gc_tuned = True
    gc.freeze()
    gc.set_threshold(_GC_GEN0, *gc.get_threshold()[1:])


def create_app(mesh: Mesh, *, fast_paths: bool = True) -> Litestar:
    """The mesh's app. `fast_paths=False` leaves every route to Litestar (the reference the fast paths are held to)."""
    _configure_logging()
    handlers: list[Any] = []
    for name in _ROUTE_MODULES:
        handlers.extend(importlib.import_module(name).ROUTES)
    dist = _console_dist(mesh)
    if dist is not None:
        handlers.extend(console_routes(dist))
    console = mesh.settings.console
    # CORS only when asked for (console.cors): listing an origin alone lets its pages send requests (the
    # browser guard admits them) but not read answers cross-origin.
    cors = (
        CORSConfig(allow_origins=list(console.allowed_origins), allow_headers=["*"], allow_methods=["*"])
        if console.cors
        else None
    )

    async def _start() -> None:
        await mesh.start()
        _tune_gc()

    async def _stop() -> None:
        await mesh.stop()

    app = _App(  # every GET route also answers HEAD
        logging_config=None,
        route_handlers=handlers,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        on_startup=[_start],
        on_shutdown=[_stop],
        request_max_body_size=mesh.settings.max_body_bytes,
        cors_config=cors,
        middleware=[browser_guard(console.allowed_origins), conditional_get()],
        openapi_config=openapi_config(),  # GET /schema/openapi.json (functions/openapi.py)
        debug=False,
    )
    app.state.mesh = mesh
    app.fast = FastPaths(
        mesh,
        FAST_PATHS if fast_paths else {},
        max_body=mesh.settings.max_body_bytes,
        allowed_origins=tuple(console.allowed_origins),
        cors=cors,
    )
    return app
