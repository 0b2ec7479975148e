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
from flux7.functions.head import HeadAsGet
from flux7.functions.hotpath import HotPath
from flux7.functions.mcp_hotpath import McpHotPath
from flux7.functions.openapi import openapi_config
from flux7.functions.raw_asgi import RawRoute
from flux7.shared.mesh import Mesh
from flux7.shared.paths import CONSOLE_DIST

__all__ = ["create_app"]

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
)


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
    """The Litestar app with the governed call and MCP's POST /mcp served ahead of its routing
    (functions/hotpath.py, functions/mcp_hotpath.py)."""

    hot: HotPath | None = None
    mcp_hot: McpHotPath | None = None

    def raw_route(self, method: str, path: str) -> RawRoute | None:
        """The hot path that serves this request, None when Litestar does."""
        if method != "POST":
            return None
        if path == "/mcp":
            return self.mcp_hot
        hot = self.hot
        return hot if hot is not None and hot.serves(path) else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            route = self.raw_route(scope["method"], scope["path"])
            if route is not None and await route(scope, receive, send):
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


def create_app(mesh: Mesh) -> Litestar:
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
    if cors is None:  # with CORS, Litestar's middleware adds its headers to every answer
        app.hot = HotPath(mesh, mesh.settings.max_body_bytes, tuple(console.allowed_origins))
        app.mcp_hot = McpHotPath(mesh, mesh.settings.max_body_bytes, tuple(console.allowed_origins))
    return app
