"""The memory-search seam: full-text search over `facts` on each store engine, behind one interface.

SQLite answers with FTS5 (fts_sqlite.py, the `facts_fts` virtual table of migrations/0003); PostgreSQL with a
`tsvector` column and a GIN index (fts_postgresql.py, migrations/postgresql/0020). Callers hand over an FTS5
MATCH expression (the memory_search `raw` syntax, or what natural mode builds) and get rows of the columns they
asked for plus a score, higher better: the engine's relevance plus the same recency term on both,
`1 / (1 + age in days)`. No engine-specific search SQL lives outside these three files.
"""

from __future__ import annotations

from flux7.shared.memory.text_search import TEXT_SEARCH_CONFIGS, TextSearch, TextSearchError
from flux7.shared.store.db import Database

__all__ = ["TEXT_SEARCH_CONFIGS", "TextSearch", "TextSearchError", "text_search_for"]


def text_search_for(db: Database, config: str = "simple") -> TextSearch:
    """The engine's full-text search; `config` (PostgreSQL) names the text search configuration."""
    if db.engine == "postgresql":
        from flux7.shared.memory.fts_postgresql import PostgresTextSearch

        return PostgresTextSearch(config)
    from flux7.shared.memory.fts_sqlite import SqliteTextSearch

    return SqliteTextSearch()
