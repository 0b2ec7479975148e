"""`flux7 restore`: lives with `flux7 backup` in flux7.shared.backup (one concept: the Litestream replica)."""

from __future__ import annotations

from .backup import restore_main as main

__all__ = ["main"]
