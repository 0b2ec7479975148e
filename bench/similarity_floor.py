"""Calibrating the dense relevance floor of hybrid memory search (issue 14.6) on the LoCoMo dev split.

A query that nothing in memory matches must answer `No memories found.` even with embeddings on, so cosine-only
candidates below a floor are not results. This prints, for the local model:
- the cosine of every (question, evidence turn) pair and of each question's best evidence turn,
- the best cosine anywhere in a conversation for queries about nothing in it (made-up words, and questions
  from unrelated domains),
so the floor can sit below what relevant evidence scores and above what unrelated queries reach. Evaluation
data is read from its folder (CC BY-NC) and never copied.

    python bench/similarity_floor.py [--data DIR] [--vectors-db PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import save  # noqa: E402
from bench.locomo_eval import DEFAULT_DATA, MemoEmbedder, dia_of, load_memories, questions  # noqa: E402
from flux7.shared.memory.embed import default_embedder  # noqa: E402
from flux7.shared.memory.vectors import VectorIndex  # noqa: E402
from flux7.shared.store.db import Database  # noqa: E402

# Queries about nothing in a chat between friends: nonsense words, and questions from far-away domains.
UNRELATED = [
    "zebra xylophone quasar",
    "quasar nebula flux capacitor",
    "xylophone zeppelin quokka",
    "kubernetes pod eviction threshold",
    "what is the boiling point of tungsten",
    "postgres vacuum freeze age",
    "ribosome translation elongation factor",
    "fourier transform of a gaussian",
    "torque converter stall speed",
    "byzantine fault tolerance quorum size",
    "mitochondrial membrane potential assay",
    "compile rust with musl target",
    "qwerty asdf zxcv",
    "lorem ipsum dolor sit amet",
    "sulfuric acid titration endpoint",
    "orbital period of phobos",
    "tcp congestion window slow start",
    "medieval trebuchet counterweight",
    "hexadecimal checksum mismatch error",
    "glacier calving rate antarctica",
]


def percentiles(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {f"p{p}": round(float(np.percentile(a, p)), 3) for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--vectors-db", type=Path, default=Path(tempfile.gettempdir()) / "flux7-locomo-vectors.db")
    args = parser.parse_args()
    conversations = json.loads((args.data / "locomo-dev.json").read_text())
    memories = load_memories(conversations)
    qs = questions(conversations, memories)
    model = default_embedder()
    if model is None:
        sys.exit("the local embedding model is not installed")
    memo = MemoEmbedder(model)
    vectors = VectorIndex(Database(args.vectors_db), memo)
    vectors.upsert_many([(m["key"], m["value"]) for m in memories])
    by_sample: dict[str, list[str]] = defaultdict(list)
    for m in memories:
        by_sample[m["sample"]].append(m["key"])

    evidence_pairs: list[float] = []
    best_evidence: list[float] = []
    for q in qs:
        keys = [k for k in by_sample[q["sample"]] if dia_of(k) in q["evidence"]]
        sims = vectors.similarities(q["question"], keys)
        evidence_pairs.extend(sims.values())
        best_evidence.append(max(sims.values()))
    unrelated_best: list[float] = []
    for query in UNRELATED:
        for keys in by_sample.values():
            unrelated_best.append(max(vectors.similarities(query, keys).values()))

    report = {
        "embedder": model.name,
        "evidence_pairs": {"n": len(evidence_pairs), **percentiles(evidence_pairs)},
        "best_evidence_per_question": {"n": len(best_evidence), **percentiles(best_evidence)},
        "unrelated_best_per_conversation": {"n": len(unrelated_best), **percentiles(unrelated_best)},
        "unrelated_max": round(max(unrelated_best), 3),
    }
    for floor in (0.15, 0.2, 0.25, 0.3, 0.35):
        report[f"floor {floor}"] = {
            "evidence_pairs_below": round(float(np.mean(np.asarray(evidence_pairs) < floor)), 3),
            "questions_whose_best_evidence_is_below": round(float(np.mean(np.asarray(best_evidence) < floor)), 3),
            "unrelated_queries_still_answered": round(float(np.mean(np.asarray(unrelated_best) >= floor)), 3),
        }
    print(json.dumps(report, indent=2))
    print(f"saved {save('similarity_floor', report)}")


if __name__ == "__main__":
    main()
