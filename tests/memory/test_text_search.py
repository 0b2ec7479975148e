"""The memory-search seam (shared/memory/fts*.py): FTS5 expressions mean the same on both engines, rare words
weigh more than common ones on both, and PostgreSQL's text search configuration is the deployment's choice."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.fts import TextSearchError
from flux7.shared.memory.fts_postgresql import idf, to_tsquery_text
from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.vectors import VectorIndex
from flux7.shared.store.db import Database
from tests.memory_vectors.test_vectors import LetterEmbedder

from .conftest import Clock, call, fail


def keys(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_fts5_expressions_become_tsqueries_with_fts5s_precedence() -> None:
    assert to_tsquery_text('paint* OR juli OR "31 july 2023"') == "('paint':* | 'juli' | ('31' <-> 'july' <-> '2023'))"
    assert to_tsquery_text("a b NOT c OR d") == "(('a' & ('b' & !'c')) | 'd')"  # NOT, then AND, then OR
    assert to_tsquery_text("a AND (b OR c)") == "('a' & ('b' | 'c'))"
    # unicode61's tokens: runs of letters and digits, so an identifier is a phrase of its parts
    assert to_tsquery_text('"conv-26.session_1.t005"') == "('conv' <-> '26' <-> 'session' <-> '1' <-> 't005')"
    assert to_tsquery_text('"Café" ÜBER*') == "('café' & 'über':*)"
    # a phrase with no tokens matches nothing: dropped from an OR, the whole AND, nothing at all alone
    assert to_tsquery_text('x OR "!!"') == "'x'"
    assert to_tsquery_text('x "!!"') is None
    assert to_tsquery_text('"--"') is None
    for bad in ("(unbalanced", "a OR", "AND b", ")", '"open'):
        with pytest.raises(TextSearchError, match="syntax error"):
            to_tsquery_text(bad)


def test_idf_is_fts5s_and_never_zero_or_negative() -> None:
    assert idf(100, 1) > idf(100, 10) > idf(100, 40)
    assert idf(100, 60) == idf(100, 100) == 1e-6


def test_raw_queries_mean_the_same_on_either_engine(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="conv-26.session_1.t005", value="Caroline went painting by the lake")
    clock.advance(1)
    call(service, "memory_store", key="deploy.window", value="Deploys happen on Tuesdays, never on Fridays")
    clock.advance(1)
    call(service, "memory_store", key="pets", value="The cat knocked the plant off the windowsill")
    assert keys(call(service, "memory_search", query="paint*")) == ["conv-26.session_1.t005"]
    assert keys(call(service, "memory_search", query="session_1")) == ["conv-26.session_1.t005"]
    assert keys(call(service, "memory_search", query="conv-26.session_1")) == ["conv-26.session_1.t005"]
    assert keys(call(service, "memory_search", query="tuesdays OR cat")) == ["pets", "deploy.window"]
    assert keys(call(service, "memory_search", query="the NOT cat")) == ["conv-26.session_1.t005"]
    assert keys(call(service, "memory_search", query='"never on fridays"')) == ["deploy.window"]
    assert call(service, "memory_search", query='"on never"') == "No memories found."
    assert fail(service, "memory_search", query="(tuesdays").startswith("search failed: ")


def test_a_rare_word_outranks_a_common_one_on_either_engine(service: MemoryService, clock: Clock) -> None:
    for i in range(12):
        call(service, "memory_store", key=f"common{i:02d}", value=f"weather report number {i}: weather is mild")
        clock.advance(1)
    call(service, "memory_store", key="rare", value="the weather and one eclipse")
    clock.advance(1)
    call(service, "memory_store", key="newest", value="weather weather weather")
    # bm25 (and PostgreSQL's IDF-weighted ts_rank_cd): the one row with the rare word first, though it is older
    # and says `weather` once, where the newest row says it three times.
    assert keys(call(service, "memory_search", query="weather OR eclipse", limit=3))[0] == "rare"


@pytest.fixture
def pg_service(tmp_path: Path, postgres_url: str, clock: Clock) -> Iterator[Callable[..., MemoryService]]:
    """A service on a PostgreSQL database, whatever --engine says (the configuration is PostgreSQL's own)."""
    made: list[MemoryService] = []

    def make(**config: Any) -> MemoryService:
        root = tmp_path / f"mem7-{len(made)}"
        service = MemoryService(
            MemoryConfig(dir=str(root), hybrid=False, **config), Database(postgres_url), clock=clock
        )
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


def test_postgresql_searches_with_the_configured_text_search_configuration(
    pg_service: Callable[..., MemoryService],
) -> None:
    simple = pg_service()
    call(simple, "memory_store", key="run", value="She was running the marathon")
    call(simple, "memory_store", key="stop", value="the")
    assert simple.searcher.index.text.config == "simple"  # type: ignore[attr-defined]
    # simple: lower-casing only, as FTS5 does; a stop word is a word like any other
    assert call(simple, "memory_search", query="runs") == "No memories found."
    assert keys(call(simple, "memory_search", query="RUNNING")) == ["run"]
    assert keys(call(simple, "memory_search", query="the")) == ["stop", "run"]
    # english, over the same rows (both columns are indexed): Snowball stems, stop words never match
    english = pg_service(text_search_config="english")
    assert keys(call(english, "memory_search", query="runs")) == ["run"]
    assert call(english, "memory_search", query="the") == "No memories found."


def test_vectors_are_ranked_in_postgresql_exactly_when_pgvector_is_installed(postgres_url: str, tmp_path: Path) -> None:
    pg = Database(postgres_url)
    lite = Database(tmp_path / "index.db")
    try:
        installed = pg.query_one("SELECT 1 FROM pg_extension WHERE extname = 'vector'") is not None
        on_pg, on_lite = VectorIndex(pg, LetterEmbedder()), VectorIndex(lite, LetterEmbedder())
        assert on_pg.in_database is installed
        assert on_lite.in_database is False
        notes = [(w, w) for w in ("apple", "banana", "cherry", "apricot", "avocado", "blueberry")]
        on_pg.upsert_many(notes)
        on_lite.upsert_many(notes)
        # the same scores and order (ties by key) whichever path ranks them
        for query in ("apple", "berry", "a"):
            got, want = on_pg.search(query, 4), on_lite.search(query, 4)
            assert [k for k, _ in got] == [k for k, _ in want]
            assert [round(s, 5) for _, s in got] == [round(s, 5) for _, s in want]
        assert on_pg.search("apple", 3, within=["banana", "cherry"]) == on_lite.search(
            "apple", 3, within=["banana", "cherry"]
        )
    finally:
        pg.close()
        lite.close()
