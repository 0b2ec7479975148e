"""memory_search's ranking: BM25 (+ recency); with a vector index, BM25 and cosine candidates fused by
`retrieval.hybrid_search` (docs/design/retrieval.md); then sequential neighbours woven in beside their hit
(CONTRACT 2.3)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import msgspec

from flux7.shared.errors import BadRequest
from flux7.shared.memory import retrieval
from flux7.shared.memory.fts import TextSearchError
from flux7.shared.memory.index import Fact, FactIndex, ReadFilter
from flux7.shared.memory.query import naturalize, neighbour_keys, parse_sequential_key, sanitize
from flux7.shared.store.db import Database

__all__ = ["RRF_K", "SearchRequest", "Searcher", "VectorSlot", "VectorSource", "default_vectors", "rrf"]

log = logging.getLogger("flux7.memory")

RRF_K = 60


class VectorSource(Protocol):
    """flux7.shared.memory.vectors.VectorIndex, as this module uses it."""

    def upsert(self, key: str, text: str) -> None: ...
    def delete(self, key: str) -> None: ...
    def search(self, query: str, k: int, *, within: Collection[str] | None = None) -> list[tuple[str, float]]: ...
    def similarities(self, query: str, keys: list[str]) -> dict[str, float]: ...
    def clear(self) -> None: ...


class SearchRequest(msgspec.Struct, kw_only=True):
    query: str
    mode: str = "raw"
    limit: int = 10
    include_neighbors: bool = False
    neighbor_radius: int = 1


def rrf(*rankings: Sequence[str], k: int = RRF_K) -> list[str]:
    """Reciprocal Rank Fusion: sum of 1/(k + rank) over the lists; ties keep first-seen order."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda key: -scores[key])


class VectorSlot:
    """The vector index, built on first use (the model is heavy) and absent when it cannot be built."""

    def __init__(
        self, db: Database, enabled: bool, factory: Callable[[Database], VectorSource | None] | None = None
    ) -> None:
        self._db = db
        self._enabled = enabled
        self._factory = factory or default_vectors
        self._lock = threading.Lock()
        self._source: VectorSource | None = None
        self._tried = False

    def get(self) -> VectorSource | None:
        if not self._enabled:
            return None
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    self._source = self._factory(self._db)
                except Exception:  # hybrid degrades to BM25, never fails a call
                    log.exception("vector index unavailable; memory search stays BM25-only")
                    self._source = None
            return self._source

    def run(self, what: str, fn: Callable[[VectorSource], Any]) -> Any:
        source = self.get()
        if source is None:
            return None
        try:
            return fn(source)
        except Exception:
            log.exception("vector index %s failed", what)
            return None


def default_vectors(
    db: Database, *, url: str = "", model: str = "", provider: str = "", key: str = ""
) -> VectorSource | None:
    """The embedding model + vector index, or None when no model is available (BM25 alone then)."""
    try:
        from flux7.shared.memory.embed import default_embedder
        from flux7.shared.memory.vectors import VectorIndex
    except ImportError:
        return None
    embedder = default_embedder(url or None, model or None, provider or None, key or None)
    if embedder is None:
        return None
    return VectorIndex(db, embedder)


class Reorder(Protocol):
    """flux7.shared.memory.rerank.Reranker, as this module uses it."""

    def rerank(self, query: str, candidates: list[tuple[str, str]], limit: int) -> list[str]: ...


class Searcher:
    def __init__(
        self,
        index: FactIndex,
        vectors: VectorSlot,
        reranker: Reorder | None = None,
        *,
        min_similarity: float | None = None,
    ) -> None:
        self.index = index
        self.vectors = vectors
        self.reranker = reranker
        self.min_similarity = min_similarity

    def _floor(self, source: VectorSource) -> float:
        """The configured floor, else the model's calibrated one (0 for a model nobody calibrated)."""
        if self.min_similarity is not None:
            return self.min_similarity
        return float(getattr(getattr(source, "embedder", None), "relevance_floor", 0.0))

    def search(self, req: SearchRequest, flt: ReadFilter) -> list[Fact]:
        text = naturalize(req.query) if req.mode == "natural" else req.query
        fts = sanitize(text)
        source = self.vectors.get()
        wide = req if self.reranker is None else msgspec.structs.replace(req, limit=3 * req.limit)
        try:
            if source is None:
                results = self.index.search(fts, flt, limit=wide.limit)
            else:
                results = self._hybrid(source, wide, fts, flt)
        except TextSearchError as e:
            raise BadRequest(f"search failed: {e}") from None
        if self.reranker is not None and results:
            # The model reorders up to 3N candidates; any failure there keeps the fused order.
            by_key = {f.entity: f for f in results}
            order = self.reranker.rerank(req.query, [(f.entity, f.value) for f in results], req.limit)
            results = [by_key[k] for k in order if k in by_key]
        if req.include_neighbors:
            results = self._with_neighbours(results, flt, max(req.neighbor_radius, 1))
        return results

    def _hybrid(self, source: VectorSource, req: SearchRequest, fts: str, flt: ReadFilter) -> list[Fact]:
        # Natural mode reads BM25 through the stemmed query (`painting` -> `paint*`); raw mode keeps its expression.
        match = sanitize(retrieval.stemmed_query(req.query)) if req.mode == "natural" else fts
        within = [f.entity for f in self.index.select(flt)] if flt.narrows else None

        def texts(keys: list[str]) -> dict[str, str]:
            return self.index.values_by_keys(keys, flt)  # only what the caller may see is ranked

        dense = _FilteredDense(source, within)
        weights = retrieval.HybridWeights(min_similarity=self._floor(source))
        ranked = retrieval.hybrid_search(
            req.query, req.limit, lambda m, n: self._scored(m, flt, n), dense, weights, match=match, texts=texts
        )
        facts = self.index.by_keys([key for key, _ in ranked], flt)  # whole facts for what is returned only
        return [facts[key] for key, _ in ranked if key in facts]

    def _scored(self, match: str, flt: ReadFilter, limit: int) -> list[tuple[str, float]]:
        """FactIndex.search's ranking (relevance + recency) with its score, higher better, one row per key."""
        return self.index.scored(match, flt, limit=limit)

    def _with_neighbours(self, results: list[Fact], flt: ReadFilter, radius: int) -> list[Fact]:
        candidates = neighbour_keys([f.entity for f in results], radius)
        found = self.index.by_keys(candidates, flt)
        if not found:
            return results
        groups: dict[str, dict[int, Fact]] = {}
        for fact in found.values():
            parsed = parse_sequential_key(fact.entity)
            if parsed:
                groups.setdefault(parsed[0], {})[parsed[1]] = fact
        woven: list[Fact] = []
        emitted: set[str] = set()

        def emit(fact: Fact) -> None:
            if fact.entity not in emitted:
                emitted.add(fact.entity)
                woven.append(fact)

        for hit in results:
            parsed = parse_sequential_key(hit.entity)
            if parsed is None:
                emit(hit)
                continue
            group = groups.get(parsed[0], {})
            before: list[Fact] = []
            off = 1
            while parsed[1] - off in group:
                before.insert(0, group[parsed[1] - off])
                off += 1
            for fact in before:
                emit(fact)
            emit(hit)
            off = 1
            while parsed[1] + off in group:
                emit(group[parsed[1] + off])
                off += 1
        for key in sorted(found):
            emit(found[key])
        return woven


class _FilteredDense:
    """The vector index as hybrid_search reads it: cosine candidates from the filtered keys only, and a
    failure of the model or the index turning the search into BM25 alone rather than an error."""

    def __init__(self, source: VectorSource, within: list[str] | None) -> None:
        self.source = source
        self.within = within
        self.failed = False

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        try:
            return self.source.search(query, k, within=self.within)
        except Exception:
            log.exception("vector search failed; using BM25 alone")
            self.failed = True
            return []

    def similarities(self, query: str, keys: list[str]) -> dict[str, float]:
        if self.failed:
            return {}
        try:
            return self.source.similarities(query, keys)
        except Exception:
            log.exception("vector similarities failed; neighbours get BM25 alone")
            return {}
