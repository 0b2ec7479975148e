"""Vector search inside PostgreSQL with pgvector, where the server has the extension.

migrations/postgresql/0004 creates the extension when `pg_available_extensions` lists it, and 0020 then gives
`memory_vectors` an `embedding vector` column beside the float32 bytes every engine keeps. Where both exist,
`VectorIndex` (vectors.py) writes the column too and ranks in the database: an exact scan by inner product
(`<#>`), the in-process matrix's score within float32 rounding (the embeddings are unit vectors, so it is their
cosine), ties broken by key in code point order as there. (Identical vectors tie exactly here; numpy's product may
round them a unit in the last place apart.) Each instance then keeps no matrix and reloads nothing when another
instance writes. No approximate (HNSW) index: the column holds every model's vectors, of any dimension, and an
exact scan keeps the results SQLite's. Without the extension, or without the column, vectors.py scans its matrix.
tests/postgres/test_pgvector.py runs both paths on a real server with pgvector and compares them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import numpy as np

from flux7.shared.store.db import Database

__all__ = ["SET_EMBEDDING", "available", "backfill", "literal", "search", "similarities", "stored_dim"]

SET_EMBEDDING = "UPDATE memory_vectors SET embedding = CAST(? AS vector) WHERE key = ?"


def available(db: Database) -> bool:
    """Whether this database ranks vectors itself: PostgreSQL with pgvector installed and 0020's column."""
    if db.engine != "postgresql":
        return False
    row = db.query_one(
        "SELECT 1 FROM pg_extension e, information_schema.columns c WHERE e.extname = 'vector' "
        "AND c.table_schema = current_schema() AND c.table_name = 'memory_vectors' AND c.column_name = 'embedding'"
    )
    return row is not None


def literal(vector: np.ndarray) -> str:
    """pgvector's text form, `[0.1,0.2,...]`; float32 values print exactly with repr of their float."""
    return "[" + ",".join(repr(float(x)) for x in vector.astype(np.float32)) + "]"


def backfill(db: Database) -> int:
    """Fill the column for rows written before it existed (or while pgvector was not installed)."""
    rows = db.query("SELECT key, vector FROM memory_vectors WHERE embedding IS NULL")
    if not rows:
        return 0
    with db.write() as conn:
        conn.executemany(SET_EMBEDDING, [(literal(np.frombuffer(bytes(r[1]), dtype=np.float32)), r[0]) for r in rows])
    return len(rows)


def stored_dim(db: Database, model: str) -> int | None:
    """The dimension of `model`'s stored vectors (one model has one), or None when it has none."""
    row = db.query_one("SELECT dim FROM memory_vectors WHERE model = ? LIMIT 1", (model,))
    return None if row is None else int(row[0])


def search(
    db: Database, model: str, query: np.ndarray, k: int, within: Collection[str] | None
) -> list[tuple[str, float]]:
    """The k best keys of `model`'s space by inner product with the query, best first, ties by key."""
    params: list[Any] = [literal(query), model, int(query.shape[0])]
    sql = (
        "SELECT key, -(embedding <#> CAST(? AS vector)) AS score FROM memory_vectors "
        "WHERE model = ? AND dim = ? AND embedding IS NOT NULL"
    )
    if within is not None:
        keys = list(dict.fromkeys(within))
        if not keys:
            return []
        sql += " AND key = ANY(?)"
        params.append(keys)
    # Ties by key in code point order, as Python sorts them on the matrix path, whatever the database's collation.
    sql += ' ORDER BY score DESC, key COLLATE "C" LIMIT ?'
    params.append(k)
    return [(str(r[0]), float(r[1])) for r in db.query(sql, tuple(params))]


def similarities(db: Database, model: str, query: np.ndarray, keys: Iterable[str]) -> dict[str, float]:
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = db.query(
        "SELECT key, -(embedding <#> CAST(? AS vector)) FROM memory_vectors "
        "WHERE model = ? AND dim = ? AND embedding IS NOT NULL AND key = ANY(?)",
        (literal(query), model, int(query.shape[0]), wanted),
    )
    return {str(r[0]): float(r[1]) for r in rows}
