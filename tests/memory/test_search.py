"""Search ranking and filters (CONTRACT 2.3): BM25 field weights, recency, modes, neighbours, TTL."""

from __future__ import annotations

import json
from typing import Any

from flux7.shared.memory.query import naturalize, neighbour_keys, sanitize
from flux7.shared.memory.search import rrf
from flux7.shared.memory.service import MemoryService

from .conftest import Clock, call, fail


def keys(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_raw_mode_sanitising_keeps_operators_and_quotes_the_rest() -> None:
    assert sanitize('foo* AND (bar OR "a b") NOT baz') == 'foo* AND (bar OR "a b") NOT baz'
    assert sanitize("conv-26 e-mail o'neil café") == '"conv-26" "e-mail" "o\'neil" "café"'
    assert sanitize('say"hi') == 'say"hi'
    assert sanitize('a"b c') == 'a"b c'


def test_natural_mode_drops_stop_words_and_prefixes_long_words() -> None:
    assert naturalize("When did Caroline go to the LGBTQ support group?") == "caroline* OR lgbtq* OR support* OR group*"
    assert naturalize("is it ok") == "is it ok"  # nothing left: unchanged
    many = " ".join(f"word{i}" for i in range(20))
    assert naturalize(many).count(" OR ") == 11


def test_neighbour_keys_keep_zero_padding() -> None:
    assert neighbour_keys(["conv-26.session_1.t005"], 2) == [
        "conv-26.session_1.t003",
        "conv-26.session_1.t004",
        "conv-26.session_1.t006",
        "conv-26.session_1.t007",
    ]
    assert neighbour_keys(["plain-key", "x.t0"], 1) == ["x.t1"]


def test_rrf_sums_reciprocal_ranks() -> None:
    assert rrf(["a", "b", "c"], ["c", "a"]) == ["a", "c", "b"]


def test_the_value_weighs_more_than_the_key_and_tags_least(service: MemoryService) -> None:
    call(service, "memory_store", key="zebra", value="nothing here")
    call(service, "memory_store", key="other", value="a zebra crossed")
    call(service, "memory_store", key="third", value="unrelated", tags=["zebra"])
    assert keys(call(service, "memory_search", query="zebra")) == ["other", "zebra", "third"]


def test_recency_breaks_ties_between_equal_matches(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="old", value="the same words")
    clock.advance(30 * 86400)
    call(service, "memory_store", key="new", value="the same words")
    assert keys(call(service, "memory_search", query="same")) == ["new", "old"]


def test_filters_tags_agent_since_until_and_limit(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="a", value="apple pie", tags=["food", "sweet"], agent="x")
    clock.advance(3600)
    call(service, "memory_store", key="b", value="apple juice", tags=["food"], agent="y")
    assert keys(call(service, "memory_search", query="apple", tags=["food", "sweet"])) == ["a"]
    assert keys(call(service, "memory_search", query="apple", agent="y")) == ["b"]
    assert keys(call(service, "memory_search", query="apple", since="2026-09-21T14:30:00Z")) == ["b"]
    assert keys(call(service, "memory_search", query="apple", until="2026-09-21T14:30:00Z")) == ["a"]
    assert keys(call(service, "memory_search", query="apple", since="garbage")) == ["b", "a"]  # ignored
    assert len(keys(call(service, "memory_search", query="apple", limit=1))) == 1


def test_a_bad_raw_query_is_a_tool_error(service: MemoryService) -> None:
    call(service, "memory_store", key="a", value="v")
    assert fail(service, "memory_search", query="(unbalanced").startswith("search failed: ")


def test_search_does_not_bump_access_but_recall_does(service: MemoryService) -> None:
    call(service, "memory_store", key="a", value="counted")
    call(service, "memory_search", query="counted")
    assert service.db.query("SELECT access_count FROM facts")[0][0] == 0
    call(service, "memory_recall", key="a")
    assert service.db.query("SELECT access_count FROM facts")[0][0] == 1


def test_neighbours_are_woven_around_their_hit(service: MemoryService) -> None:
    for i, text in enumerate(["hello", "she joined the group", "when?", "May 7", "bye"], start=1):
        call(service, "memory_store", key=f"conv-1.s1.t{i:03d}", value=text)
    text = call(service, "memory_search", query="group", include_neighbors=True, neighbor_radius=2)
    assert keys(text) == [f"conv-1.s1.t{i:03d}" for i in (1, 2, 3, 4)]
    assert text.startswith("4 results")


def test_ttl_hides_expired_rows_and_prune_drops_them(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="short", value="ephemeral", ttl=60)
    call(service, "memory_store", key="long", value="ephemeral forever")
    clock.advance(61)
    assert keys(call(service, "memory_search", query="ephemeral")) == ["long"]
    assert call(service, "memory_store", key="n", value="v") == "Memory 'n' created (2 total entries)"
    assert service.store.prune() == 1
    assert service.db.query("SELECT COUNT(*) FROM facts WHERE entity = 'short'")[0][0] == 0
    assert "ttl: 60" in next((service.store.workspace / "memory").glob("*.md")).read_text()  # markdown untouched


def test_hybrid_finds_by_meaning_what_bm25_cannot(make_service: Any) -> None:
    service = make_service(hybrid=True)  # the installed MiniLM model and the SQLite vector index
    assert service.vectors.get() is not None
    call(service, "memory_store", key="pet", value="we adopted a kitten last spring")
    call(service, "memory_store", key="money", value="the stock market crashed")
    call(service, "memory_store", key="gone", value="a feline that left")
    call(service, "memory_forget", key="gone")
    found = [m["key"] for m in json.loads(call(service, "memory_context", query="feline companion", limit=1))]
    assert found == ["pet"]
    call(service, "memory_store", key="cat.tagged", value="budget for the cat food this quarter", tags=["finance"])
    call(service, "memory_store", key="revenue", value="quarterly revenue report", tags=["finance"])
    tagged = json.loads(call(service, "memory_context", query="feline companion", tags=["finance"], limit=3))
    # dense candidates come from the filtered keys only (the kitten scores higher but is not tagged), and an
    # unrelated one below the relevance floor is no result
    assert [m["key"] for m in tagged] == ["cat.tagged"]
    bm25_only = make_service(service.store.root.parent / "plain")
    call(bm25_only, "memory_store", key="pet", value="we adopted a kitten last spring")
    assert call(bm25_only, "memory_context", query="feline companion") == "[]"


def test_an_llm_rerank_reorders_the_candidates_and_its_failure_keeps_bm25_order(make_service: Any) -> None:
    from tests.support.http import serve_json

    answers = ["[2, 1]"]

    def ollama(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        assert (method, path) == ("POST", "/api/generate")
        prompt = json.loads(body)["prompt"]
        assert "Query: apple" in prompt and "[1]" in prompt and "[2]" in prompt
        return (200, {"response": answers[0]}) if answers[0] else (500, {"error": "model not loaded"})

    with serve_json(ollama) as (url, seen):
        service = make_service(rerank_url=url)
        call(service, "memory_store", key="first", value="apple apple apple")
        call(service, "memory_store", key="second", value="apple pie")
        assert keys(call(service, "memory_search", query="apple", limit=2)) == ["second", "first"]
        answers[0] = ""
        assert keys(call(service, "memory_search", query="apple", limit=2)) == ["first", "second"]
        assert len(seen) == 2
