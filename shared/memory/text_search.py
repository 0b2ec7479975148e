"""What every full-text search engine of memory shares (shared/memory/fts.py picks one per store engine)."""

from __future__ import annotations

from typing import Any, Protocol

from flux7.shared.store.db import Database

__all__ = ["TEXT_SEARCH_CONFIGS", "TextSearch", "TextSearchError"]

# PostgreSQL text search configurations a deployment may choose (docs/memory.md, "Ranking on PostgreSQL").
TEXT_SEARCH_CONFIGS = ("simple", "english")


class TextSearchError(ValueError):
    """A MATCH expression the engine cannot run (unbalanced parentheses, a dangling operator): a bad request."""


class TextSearch(Protocol):
    def ranked(
        self, db: Database, columns: str, match: str, where: str, params: list[Any], now: int, limit: int
    ) -> list[Any]:
        """Rows `SELECT {columns}, <score>` of `facts f` matching `match` and `where`, best first (ties: the
        newer row first), at most `limit`. Raises TextSearchError on a malformed expression."""
        ...

    def reset(self, conn: Any) -> None:
        """After every fact is deleted (a rescan): rewind the id sequence and empty the search index."""
        ...
