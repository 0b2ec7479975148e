from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from flux7.shared.errors import BadRequest
from flux7.shared.memory.embed import MiniLMEmbedder, default_embedder
from flux7.shared.memory.vectors import VectorIndex
from flux7.shared.store.db import Database

NOTES = [
    ("pets", "I adopted a golden retriever puppy named Max last week."),
    ("work", "The quarterly budget review moved to Thursday afternoon."),
    ("trip", "We are flying to Lisbon in June for a week of sightseeing."),
    ("food", "My favourite dish is spicy ramen with a soft-boiled egg."),
]


class LetterEmbedder:
    """A second, deterministic vector space (letter counts), for tests where the model does not matter."""

    name = "letters-v1"
    dim = 26

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 26), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    rows[i, ord(ch) - 97] += 1
        rows[:, 0] += 1e-3  # never an all-zero row
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def version(db: Database) -> int:
    row = db.query_one("SELECT version FROM memory_vectors_version")
    assert row is not None
    return int(row[0])


def test_search_ranks_the_semantically_closest_memory_first(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    results = index.search("my new dog", 2)
    assert next(key for key, _ in results) == "pets"
    assert len(results) == 2
    assert results[0][1] > results[1][1]
    assert all(-1.0 <= score <= 1.0 for _, score in results)
    assert index.search("holiday abroad", 1)[0][0] == "trip"


def test_search_returns_at_most_the_index_size_and_nothing_for_k_zero(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    assert len(index.search("anything", 50)) == len(NOTES)
    assert index.search("anything", 0) == []


def test_search_within_a_key_set_scores_only_those_keys(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    results = index.search("my new dog", 3, within={"work", "food", "absent-key"})
    assert {key for key, _ in results} == {"work", "food"}


def test_upsert_replaces_the_vector_of_an_existing_key(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    index.upsert("work", "Our cat knocked a vase off the shelf.")
    assert index.search("kitty broke something", 1)[0][0] == "work"
    assert len(index) == len(NOTES)


def test_unchanged_text_is_not_rewritten(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    before = version(db)
    index.upsert_many(NOTES[:2])
    assert version(db) == before
    index.upsert("pets", "changed text")
    assert version(db) == before + 1


def test_delete_and_clear_remove_vectors(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    index.delete("pets")
    index.delete("never-stored")
    assert "pets" not in {key for key, _ in index.search("my new dog", 10)}
    index.clear()
    assert index.search("my new dog", 10) == []
    assert db.query("SELECT key FROM memory_vectors") == []


def test_bad_items_raise_and_write_nothing(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    with pytest.raises(BadRequest, match="non-empty"):
        index.upsert_many([("ok", "fine text"), ("", "no key")])
    with pytest.raises(BadRequest, match="must be a string"):
        index.upsert_many([("ok", "fine text"), ("bad", None)])  # type: ignore[list-item]
    assert db.query("SELECT key FROM memory_vectors") == []


def test_another_worker_sees_writes_and_deletes_on_its_next_search(db_path: Path | str, minilm: MiniLMEmbedder) -> None:
    db_a, db_b = Database(db_path), Database(db_path)
    a, b = VectorIndex(db_a, minilm), VectorIndex(db_b, minilm)
    try:
        a.upsert_many(NOTES[1:])
        assert b.search("my new dog", 1)[0][0] != "pets"  # b's cache is now built
        a.upsert(*NOTES[0])
        assert b.search("my new dog", 1)[0][0] == "pets"
        b.delete("pets")
        assert "pets" not in {key for key, _ in a.search("my new dog", 10)}
        b.clear()
        assert a.search("my new dog", 10) == []
    finally:
        db_a.close()
        db_b.close()


@pytest.mark.served
def test_a_write_from_another_process_is_seen_by_this_one(db_path: Path | str, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(Database(db_path), minilm)
    index.upsert_many(NOTES[1:])
    assert index.search("my new dog", 1)[0][0] != "pets"
    writer = textwrap.dedent(
        f"""
        from flux7.shared.store.db import Database
        from flux7.shared.memory.embed import default_embedder
        from flux7.shared.memory.vectors import VectorIndex
        VectorIndex(Database({str(db_path)!r}), default_embedder()).upsert({NOTES[0][0]!r}, {NOTES[0][1]!r})
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=120)
    assert index.search("my new dog", 1)[0][0] == "pets"


def test_vectors_of_another_model_are_never_compared(db: Database, minilm: MiniLMEmbedder) -> None:
    letters = VectorIndex(db, LetterEmbedder())
    letters.upsert_many(NOTES)
    semantic = VectorIndex(db, minilm)
    assert semantic.search("my new dog", 5) == []
    assert semantic.missing(["pets", "work"]) == ["pets", "work"]
    semantic.upsert_many(NOTES)  # re-embedding in the new space replaces the old rows
    assert semantic.missing(["pets", "work"]) == []
    assert letters.search("dog", 5) == []


def test_searching_an_empty_index_does_not_load_the_model(db: Database) -> None:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder)
    assert VectorIndex(db, embedder).search("anything", 5) == []
    assert not embedder.loaded


def test_similarities_score_given_keys_only(db: Database, minilm: MiniLMEmbedder) -> None:
    index = VectorIndex(db, minilm)
    index.upsert_many(NOTES)
    scores = index.similarities("my new dog", ["pets", "work", "absent"])
    assert set(scores) == {"pets", "work"}
    assert scores["pets"] > scores["work"]


def test_many_upserts_and_deletes_keep_the_cache_equal_to_the_table(db_path: Path | str) -> None:
    embedder = LetterEmbedder()
    db_a, db_b = Database(db_path), Database(db_path)
    a, b = VectorIndex(db_a, embedder), VectorIndex(db_b, embedder)
    try:
        words = [f"{w}{i}" for i, w in enumerate(["apple", "banana", "cherry", "date", "elder", "fig"] * 10)]
        a.upsert_many([(w, w) for w in words[:30]])
        a.search("x", 1)  # a's cache built; later own writes are applied in place
        for i, w in enumerate(words[30:]):
            a.upsert(w, w)
            if i % 3 == 0:
                a.delete(words[i])
        expected = {r[0] for r in db_a.query("SELECT key FROM memory_vectors")}
        assert {k for k, _ in a.search("banana", 100)} == expected
        assert {k for k, _ in b.search("banana", 100)} == expected
        assert a.search("banana", 3) == b.search("banana", 3)
    finally:
        db_a.close()
        db_b.close()
