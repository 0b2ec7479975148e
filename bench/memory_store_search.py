"""Memory store and search latency at 10k and 100k entries (p50/p95), BM25 and hybrid.

    python bench/memory_store_search.py [--sizes 10000 100000] [--ops 200] [--hybrid-max 2000] [--synthetic-vectors]

The corpus is synthetic (Zipf-distributed words). Each size is loaded through the real write path up to
10k entries; beyond that the markdown is generated with the real entry format and seals and indexed by
`rescan`, which is what a restore does. Store latency is then measured through MemoryService.call_tool
(one BEGIN IMMEDIATE transaction, a markdown append and the index update per store). Hybrid needs an
embedding of every entry, so it is measured only up to --hybrid-max entries. Figures go to stdout and to
bench/results/memory_store_search.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from flux7.shared.memory.chain import seal
from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.workspace import Entry, daily_file, format_entry, parse_entries
from flux7.shared.store.db import Database

RESULTS = Path(__file__).resolve().parent / "results" / "memory_store_search.json"
WRITE_PATH_LIMIT = 10_000


def vocabulary(rng: random.Random, n: int = 5000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(n)]


def sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(
        words[min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)] if rng.random() < 0.5 else rng.choice(words)
        for _ in range(rng.randint(8, 30))
    )


def key_of(i: int) -> str:
    return f"bench.s{i // 50:05d}.t{i % 50:03d}"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3),
        "n": len(ordered),
    }


def bulk_workspace(root: Path, n: int, rng: random.Random, words: list[str]) -> None:
    """The markdown n real stores would have left, sealed in one chain, spread over daily files."""
    head, start = "", int(time.time()) - n  # one entry a second, ending now
    files: dict[str, list[bytes]] = {}
    for i in range(n):
        moment = start + i
        entry = Entry(
            op="store",
            entity=key_of(i),
            tags=[f"t{i % 20}"],
            agent=f"agent{i % 5}",
            created=moment,
            updated=moment,
            body=sentence(rng, words),
        )
        (draft,) = parse_entries(format_entry(entry).encode()).entries
        entry.prev, entry.hash = head, seal(b"", draft, head)
        head = entry.hash
        files.setdefault(daily_file(moment), []).append(format_entry(entry).encode())
    for name, blocks in files.items():
        path = root / "workspace" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(blocks))


def timed(fn: Any, count: int) -> list[float]:
    samples = []
    for i in range(count):
        t = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t)
    return samples


class _RandomEmbedder:
    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim
        self._rng = np.random.default_rng(7)

    def embed(self, texts: list[str]) -> Any:
        v = self._rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def run_size(
    n: int, ops: int, hybrid_max: int, rng: random.Random, words: list[str], synthetic_vectors: bool = False
) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"mem7-bench-{n}-"))
    config = MemoryConfig(dir=str(root), max_entries=n * 2, hybrid=False)
    load_start = time.perf_counter()
    if n <= WRITE_PATH_LIMIT:
        service = MemoryService(config, Database(root / "index.db"))
        for i in range(n):
            service.call_tool(
                "memory_store",
                {"key": key_of(i), "value": sentence(rng, words), "tags": [f"t{i % 20}"], "agent": f"agent{i % 5}"},
            )
        how = "write path"
    else:
        bulk_workspace(root, n, rng, words)
        service = MemoryService(config, Database(root / "index.db"))  # opening indexes the workspace
        how = "generated markdown + rescan"
    load_s = time.perf_counter() - load_start
    # raw: one or two common words (FTS5 AND); natural: a question whose words are ORed and prefix-matched
    queries = [" ".join(rng.choice(words[:300]) for _ in range(rng.randint(1, 2))) for _ in range(ops)]
    questions = [
        f"what did {rng.choice(words)} say about {rng.choice(words[:800])} and {rng.choice(words)}?" for _ in range(ops)
    ]
    result: dict[str, Any] = {"entries": n, "load": how, "load_s": round(load_s, 1)}
    hits = [service.call_tool("memory_search", {"query": q, "limit": 10})[0].split(" ", 1)[0] for q in queries]
    result["raw_queries_with_hits"] = sum(h.isdigit() for h in hits)
    result["search_bm25_raw"] = percentiles(
        timed(lambda i: service.call_tool("memory_search", {"query": queries[i], "limit": 10}), ops)
    )
    result["search_bm25_natural"] = percentiles(
        timed(
            lambda i: service.call_tool("memory_search", {"query": questions[i], "mode": "natural", "limit": 10}), ops
        )
    )
    result["store"] = percentiles(
        timed(
            lambda i: service.call_tool(
                "memory_store", {"key": f"new.{i}", "value": sentence(rng, words), "tags": ["new"]}
            ),
            ops,
        )
    )
    result["chain_holds"] = service.chain()["holds"]
    service.close()
    if n <= hybrid_max or synthetic_vectors:
        hybrid = MemoryService(msgspec_replace(config, hybrid=True), Database(root / "index.db"))
        vectors = hybrid.vectors.get()
        if vectors is None:
            result["search_hybrid"] = "no embedding model installed"
        else:
            t = time.perf_counter()
            if n > hybrid_max:
                # Search latency does not depend on what the corpus vectors say: give the corpus random unit
                # vectors under the real model's name (embedding 100k texts here takes hours); queries are
                # still embedded by the real model.
                real = vectors.embedder
                vectors.embedder = _RandomEmbedder(real.name, getattr(real, "dim", 384))
                try:
                    hybrid.reindex_vectors()
                finally:
                    vectors.embedder = real
                result["corpus_vectors"] = "synthetic (random unit vectors); query embeddings real"
            else:
                hybrid.reindex_vectors()
            result["embed_all_s"] = round(time.perf_counter() - t, 1)
            hybrid.call_tool("memory_search", {"query": "warm up", "limit": 10})
            result["search_hybrid"] = percentiles(
                timed(
                    lambda i: hybrid.call_tool(
                        "memory_search", {"query": questions[i], "mode": "natural", "limit": 10}
                    ),
                    ops,
                )
            )
        hybrid.close()
    else:
        result["search_hybrid"] = f"not measured above {hybrid_max} entries (embedding every entry first)"
    return result


def msgspec_replace(config: MemoryConfig, **changes: Any) -> MemoryConfig:
    import msgspec

    return msgspec.structs.replace(config, **changes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--hybrid-max", type=int, default=2_000)
    parser.add_argument(
        "--synthetic-vectors", action="store_true", help="above --hybrid-max, random corpus vectors (latency only)"
    )
    args = parser.parse_args()
    rng = random.Random(7)
    words = vocabulary(rng)
    runs = []
    for n in args.sizes:
        run = run_size(n, args.ops, args.hybrid_max, rng, words, args.synthetic_vectors)
        print(json.dumps(run, indent=2), flush=True)
        runs.append(run)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": {"python": platform.python_version(), "platform": platform.platform()},
                "targets_at_100k": {"bm25_search_p50_ms": 10, "hybrid_search_p50_ms": 30},
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
