"""Memory vectors: one embedding per memory key in the database, searched by brute-force cosine over a matrix.

The table (migrations/0004) is shared by every worker and process. Each `VectorIndex` keeps the rows of its
embedder's vector space as a numpy matrix, tagged with the version counter that triggers bump on every change;
a search reads that counter (one indexed row) and reloads the matrix only when another writer moved it. This
worker's own writes are applied to the matrix in place, so a store does not cost a reload.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np

from flux7.shared.errors import BadRequest
from flux7.shared.memory import vectors_pgvector
from flux7.shared.memory.embed import Embedder, EmbeddingUnavailable
from flux7.shared.store.db import Database

__all__ = ["VectorIndex"]

_CHUNK = 500  # keys per IN (...) lookup
_QUERY_CACHE = 32


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Matrix:
    """Rows addressable by key, with amortised O(1) append and swap-with-last removal."""

    def __init__(self, dim: int, keys: list[str] | None = None, rows: np.ndarray | None = None) -> None:
        self.dim = dim
        self.keys: list[str] = list(keys or [])
        self.pos = {k: i for i, k in enumerate(self.keys)}
        n = len(self.keys)
        self._data = np.zeros((max(16, n), dim), dtype=np.float32)
        if rows is not None and n:
            self._data[:n] = rows

    @property
    def rows(self) -> np.ndarray:
        return self._data[: len(self.keys)]

    def set(self, key: str, vector: np.ndarray) -> None:
        i = self.pos.get(key)
        if i is None:
            i = len(self.keys)
            if i == self._data.shape[0]:
                grown = np.zeros((2 * i, self.dim), dtype=np.float32)
                grown[:i] = self._data[:i]
                self._data = grown
            self.keys.append(key)
            self.pos[key] = i
        self._data[i] = vector

    def remove(self, key: str) -> None:
        i = self.pos.pop(key, None)
        if i is None:
            return
        last = len(self.keys) - 1
        if i != last:
            moved = self.keys[last]
            self.keys[i] = moved
            self.pos[moved] = i
            self._data[i] = self._data[last]
        self.keys.pop()


class VectorIndex:
    """Embeddings of memory texts, by key. Scores are cosine similarities in [-1, 1], best first."""

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder
        self._lock = threading.Lock()
        self._matrix: _Matrix | None = None
        self._version = -1  # the table version the matrix reflects; -1: not loaded
        self._queries: dict[str, np.ndarray] = {}  # recent query vectors, oldest first
        # PostgreSQL with pgvector ranks in the database (vectors_pgvector.py); otherwise the matrix here.
        self.in_database = vectors_pgvector.available(db)
        if self.in_database:
            vectors_pgvector.backfill(db)

    # -- writes ---------------------------------------------------------------------------------------------

    def upsert(self, key: str, text: str) -> None:
        self.upsert_many([(key, text)])

    def upsert_many(self, items: list[tuple[str, str]]) -> None:
        """Embed and store texts by key; a key whose stored text (same model) is unchanged is not re-embedded.

        The embedding runs before the write transaction opens, so it never holds the database's write lock.
        """
        latest: dict[str, str] = {}
        for item in items:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise BadRequest(f"vector upsert items are (key, text) pairs, got {item!r}")
            key, text = item
            if not isinstance(key, str) or not key:
                raise BadRequest("vector key must be a non-empty string")
            if not isinstance(text, str):
                raise BadRequest(f"vector text for {key!r} must be a string")
            latest[key] = text  # the last text given for a key wins, as sequential upserts would
        if not latest:
            return
        name = self.embedder.name
        hashes = {key: _text_hash(text) for key, text in latest.items()}
        unchanged = self._unchanged(name, hashes)
        todo = [key for key in latest if key not in unchanged]
        if not todo:
            return
        vectors = self.embedder.embed([latest[key] for key in todo])
        if vectors.ndim != 2 or vectors.shape[0] != len(todo):
            raise EmbeddingUnavailable(f"embedder {name} returned shape {vectors.shape} for {len(todo)} texts")
        dim = int(vectors.shape[1])
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self.db.write() as conn:
            before = _version(conn)
            conn.executemany(
                "INSERT INTO memory_vectors (key, model, dim, vector, text_sha256) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET model = excluded.model, dim = excluded.dim, "
                "vector = excluded.vector, text_sha256 = excluded.text_sha256, "
                f"updated_at = {self.db.utc_now_sql()}",
                [(key, name, dim, vectors[i].tobytes(), hashes[key]) for i, key in enumerate(todo)],
            )
            if self.in_database:
                conn.executemany(
                    vectors_pgvector.SET_EMBEDDING,
                    [(vectors_pgvector.literal(vectors[i]), key) for i, key in enumerate(todo)],
                )
            after = _version(conn)
        with self._lock:
            m = self._matrix
            if m is not None and self._version == before and m.dim == dim:
                for i, key in enumerate(todo):
                    m.set(key, vectors[i])
                self._version = after

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return
        with self.db.write() as conn:
            before = _version(conn)
            conn.executemany("DELETE FROM memory_vectors WHERE key = ?", [(k,) for k in wanted])
            after = _version(conn)
        with self._lock:
            if self._matrix is not None and self._version == before:
                for key in wanted:
                    self._matrix.remove(key)
                self._version = after

    def clear(self) -> None:
        """Drop every vector, of every model (a rescan re-embeds what it replays)."""
        with self.db.write() as conn:
            conn.execute("DELETE FROM memory_vectors")
        with self._lock:
            self._matrix = None
            self._version = -1

    # -- reads ----------------------------------------------------------------------------------------------

    def search(self, query: str, k: int, *, within: Collection[str] | None = None) -> list[tuple[str, float]]:
        """The k keys whose vectors are closest to the query's, with cosine scores, best first.

        `within` restricts the candidates to those keys (the caller's filters: tags, agent, TTL, time).
        An empty index answers [] without loading the model.
        """
        if not isinstance(query, str):
            raise BadRequest("vector search query must be a string")
        if k <= 0:
            return []
        if self.in_database:
            dim = vectors_pgvector.stored_dim(self.db, self.embedder.name)
            if dim is None:
                return []  # an empty index never loads the model
            q = self._query_vector(query)
            self._check_dim(q, dim)
            return vectors_pgvector.search(self.db, self.embedder.name, q, k, within)
        with self._lock:
            m = self._fresh()
            if m is None or not m.keys:
                return []  # an empty index never loads the model
        q = self._query_vector(query)  # outside the lock: embedding is the slow part
        with self._lock:
            m = self._fresh()
            if m is None:
                return []
            # Score in place under the lock: copying a 100k x 384 matrix per query cost more than the product.
            if within is None:
                positions: list[int] | None = None
                rows = m.rows
            else:
                positions = [m.pos[key] for key in dict.fromkeys(within) if key in m.pos]
                rows = m.rows[positions]
            if not len(rows):
                return []
            self._check_dim(q, rows.shape[1])
            scores = rows @ q
            n = len(scores)
            if k < n:
                # Everything tied with the k-th score stays in, so ties break by key, the same on every worker.
                kth = np.partition(scores, n - k)[n - k]
                idx = np.flatnonzero(scores >= kth)
            else:
                idx = np.arange(n)
            keys = m.keys
            ranked = sorted((-float(scores[i]), keys[i if positions is None else positions[i]]) for i in idx)[:k]
        return [(key, -neg) for neg, key in ranked]

    def similarities(self, query: str, keys: Iterable[str]) -> dict[str, float]:
        """The cosine score of each given key that has a vector (keys without one are left out)."""
        wanted = list(dict.fromkeys(keys))
        if self.in_database:
            dim = vectors_pgvector.stored_dim(self.db, self.embedder.name) if wanted else None
            if dim is None:
                return {}
            q = self._query_vector(query)
            self._check_dim(q, dim)
            return vectors_pgvector.similarities(self.db, self.embedder.name, q, wanted)
        found, rows = self._candidates(wanted)
        if not found:
            return {}
        q = self._query_vector(query)
        self._check_dim(q, rows.shape[1])
        return {key: float(s) for key, s in zip(found, rows @ q, strict=True)}

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The keys with no vector in the current embedder's space (to backfill after a model change)."""
        wanted = list(dict.fromkeys(keys))
        have: set[str] = set()
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.db.query(
                f"SELECT key FROM memory_vectors WHERE model = ? AND key IN ({marks})",
                (self.embedder.name, *chunk),
            )
            have.update(r[0] for r in rows)
        return [key for key in wanted if key not in have]

    def __len__(self) -> int:
        keys, _ = self._candidates(None)
        return len(keys)

    def _check_dim(self, query: np.ndarray, stored: int) -> None:
        # A model that changed its output size under the same name (a remote embedder's `dimensions`): its old
        # vectors cannot be compared with the query; a clear error on both paths rather than numpy's or nothing.
        if query.shape[0] != stored:
            raise EmbeddingUnavailable(
                f"embedder {self.embedder.name}: {query.shape[0]} dimensions, stored vectors {stored}"
            )

    def _query_vector(self, query: str) -> np.ndarray:
        # A hybrid search asks for the same query's vector twice (top list, then its neighbours' scores).
        with self._lock:
            hit = self._queries.get(query)
        if hit is not None:
            return hit
        vector: np.ndarray = self.embedder.embed([query])[0]
        with self._lock:
            if len(self._queries) >= _QUERY_CACHE:
                self._queries.pop(next(iter(self._queries)))
            self._queries[query] = vector
        return vector

    # -- cache ----------------------------------------------------------------------------------------------

    def _candidates(self, within: Collection[str] | None) -> tuple[list[str], np.ndarray]:
        with self._lock:
            m = self._fresh()
            if m is None:
                return [], np.zeros((0, 0), dtype=np.float32)
            if within is None:
                return list(m.keys), m.rows.copy()
            idx = [m.pos[key] for key in dict.fromkeys(within) if key in m.pos]
            return [m.keys[i] for i in idx], m.rows[idx]

    def _fresh(self) -> _Matrix | None:
        """The matrix for the table's current version (caller holds self._lock)."""
        reader = self.db.reader
        current = _version(reader)
        if self._version == current:
            return self._matrix
        # The version and the rows from one snapshot: one statement reads one on either engine (a reader's
        # BEGIN would not hold on PostgreSQL, where each read may take another pooled connection).
        rows = reader.execute(
            "SELECT v.version, m.key, m.dim, m.vector FROM memory_vectors_version v "
            "LEFT JOIN memory_vectors m ON m.model = ? WHERE v.id = 1",
            (self.embedder.name,),
        ).fetchall()
        self._matrix = _load([r[1:] for r in rows if r[1] is not None])
        self._version = int(rows[0][0]) if rows else 0
        return self._matrix

    def _unchanged(self, name: str, hashes: dict[str, str]) -> set[str]:
        keys = list(hashes)
        same: set[str] = set()
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.db.query(
                f"SELECT key, text_sha256 FROM memory_vectors WHERE model = ? AND key IN ({marks})",
                (name, *chunk),
            )
            same.update(r[0] for r in rows if hashes[r[0]] == r[1])
        return same


def _version(conn: Any) -> int:
    row = conn.execute("SELECT version FROM memory_vectors_version WHERE id = 1").fetchone()
    return int(row[0]) if row else 0


def _load(rows: list[Any]) -> _Matrix | None:
    if not rows:
        return None
    # One embedder name means one dimension; rows of any other length are not comparable and are skipped.
    dim = int(rows[0][1])
    kept = [r for r in rows if int(r[1]) == dim]
    matrix = np.frombuffer(b"".join(bytes(r[2]) for r in kept), dtype=np.float32).reshape(len(kept), dim)
    return _Matrix(dim, [r[0] for r in kept], matrix)
