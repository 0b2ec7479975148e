"""The mesh's runtime: every component built once from Settings and shared by handlers and transports."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .db import Database
from .identity import IdentityResolver
from .settings import Settings

__all__ = ["Mesh"]

log = logging.getLogger("flux7.mesh")


class Mesh:
    """Holds the components of one process. Stateless between requests: all shared state is in `db`."""

    def __init__(self, settings: Settings, *, db: Database | None = None) -> None:
        self.settings = settings
        self.db = db or Database(settings.resolve_path(settings.storage_path))
        self.identity = IdentityResolver(settings)
        self.extras: dict[str, Any] = {}

    @property
    def data_dir(self) -> Path:
        return Path(self.db.path).parent

    async def start(self) -> None:
        """Start background parts (upstream connections, exporters). Called once per worker at startup."""

    async def stop(self) -> None:
        """Stop background parts and flush what they hold."""
        self.db.close()
