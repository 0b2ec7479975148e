"""The HTTP apps, as the core reaches them: supplied by the entry point, never imported from here.

The core (`shared/`) never imports the edge (`functions/`). Three commands still need a web app: `flux7 serve`
hands granian a factory to import in each worker, `mem7 serve` the memory role's, and `mesh7 --mcp` serves the
mesh's HTTP API beside stdio. The composition root (`functions/entry.py`, behind every console script) provides
them once at start; a command that needs one without it says how to run it instead."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flux7.shared.errors import Flux7Error

__all__ = ["WebApps", "current", "provide"]


@dataclass(frozen=True)
class WebApps:
    mesh_factory: str  # "module:function" that granian imports in each `flux7 serve` worker: an RSGI app
    memory_factory: str  # the same for `mem7 serve`
    mesh_app: Callable[[Any], Any]  # Mesh -> its ASGI app (the HTTP API beside `mesh7 --mcp`)


_provided: WebApps | None = None


def provide(apps: WebApps) -> None:
    global _provided
    _provided = apps


def current() -> WebApps:
    if _provided is None:
        raise Flux7Error(
            "this command serves HTTP and needs the web apps: run it as `flux7 …` / `mesh7 …` / `mem7 …` "
            "(or `python -m flux7.functions.entry …`), not `python -m flux7.shared.cli.main`"
        )
    return _provided
