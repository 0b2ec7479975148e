"""Full-text search on SQLite: FTS5's bm25 over (entity, predicate, object, tags), plus recency (CONTRACT 2.3)."""

from __future__ import annotations

from typing import Any

from flux7.shared.memory.text_search import TextSearchError
from flux7.shared.store.db import Database, sqlite3

__all__ = ["SqliteTextSearch"]

# bm25 weights per column (entity, predicate, object, tags); bm25 is lower-better, so the score negates it.
_SCORE = "-bm25(facts_fts, 2.0, 0.0, 5.0, 0.5) + 1.0 / (1.0 + (? - f.updated_at) / 86400.0)"


class SqliteTextSearch:
    def ranked(
        self, db: Database, columns: str, match: str, where: str, params: list[Any], now: int, limit: int
    ) -> list[Any]:
        try:
            return db.query(
                f"SELECT {columns}, {_SCORE} AS score FROM facts f JOIN facts_fts ON facts_fts.rowid = f.id "
                f"WHERE facts_fts MATCH ? AND {where} ORDER BY score DESC, f.id DESC LIMIT ?",
                (now, match, *params, limit),
            )
        except sqlite3.OperationalError as e:  # an FTS5 syntax error ("fts5: syntax error near ...")
            raise TextSearchError(str(e)) from None

    def reset(self, conn: Any) -> None:
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'facts'")
        conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")
