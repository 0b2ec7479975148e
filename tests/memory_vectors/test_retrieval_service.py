"""The improved hybrid ranking on the service's real search path: memory_store, then memory_context."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.embed import MiniLMEmbedder
from flux7.shared.memory.search import default_vectors
from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.vectors import VectorIndex
from flux7.shared.store.db import Database
from tests.memory.stores import Stores

from .conftest import ApiServer

T0 = 1_790_000_000


class Clock:
    def __init__(self) -> None:
        self.now = float(T0)

    def __call__(self) -> float:
        return self.now


Factory = Callable[[Database], Any]


@pytest.fixture
def make(tmp_path: Path, stores: Stores) -> Iterator[Callable[[Factory, Clock], MemoryService]]:
    made: list[MemoryService] = []

    def build(vectors: Factory, clock: Clock) -> MemoryService:
        root = tmp_path / f"mem7-{len(made)}"
        service = MemoryService(
            MemoryConfig(dir=str(root), hybrid=True), Database(stores.target(root)), clock=clock, vectors=vectors
        )
        made.append(service)
        return service

    yield build
    for service in made:
        service.close()


def call(service: MemoryService, tool: str, **arguments: Any) -> str:
    text, is_error = service.call_tool(tool, arguments)
    assert not is_error, text
    return text


def context_keys(service: MemoryService, **arguments: Any) -> list[str]:
    return [m["key"] for m in json.loads(call(service, "memory_context", mode="natural", **arguments))]


def store_chat(service: MemoryService) -> None:
    """Two short sessions; the answer about the game (t003) does not share a word with the question."""
    turns = {
        "chat.session_1.t001": ("[8 May 2023] Caroline: Hi Melanie, how was the weekend?", ["chat", "s1"]),
        "chat.session_1.t002": ("[8 May 2023] Caroline: What is your favourite board game?", ["chat", "s1"]),
        "chat.session_1.t003": ("[8 May 2023] Melanie: Chess, since I was a little kid.", ["chat", "s1"]),
        "chat.session_2.t001": ("[9 June 2023] Melanie: I started a pottery class.", ["chat", "s2"]),
        "chat.session_2.t002": ("[9 June 2023] Caroline: Pottery sounds relaxing!", ["chat", "s2"]),
    }
    for key, (value, tags) in turns.items():
        call(service, "memory_store", key=key, value=value, tags=tags, agent="chat")


def test_the_reply_is_found_through_the_turn_it_answers(make: Any, minilm: MiniLMEmbedder) -> None:
    service = make(lambda db: VectorIndex(db, minilm), Clock())
    store_chat(service)
    found = context_keys(service, query="favourite board game", tags=["chat"], limit=3)
    assert found[0] == "chat.session_1.t002"
    assert "chat.session_1.t003" in found  # the reply rides on its question


def test_filters_hold_for_neighbour_keys_too(make: Any, minilm: MiniLMEmbedder) -> None:
    clock = Clock()
    service = make(lambda db: VectorIndex(db, minilm), clock)
    store_chat(service)
    call(service, "memory_store", key="chat.session_1.t004", value="Caroline: a board game night?", ttl=60)
    call(service, "memory_store", key="chat.session_1.t005", value="Melanie: board games, yes!", agent="other")
    everything = context_keys(service, query="favourite board game", limit=10)
    assert {"chat.session_1.t003", "chat.session_1.t004", "chat.session_1.t005"} <= set(everything)
    # A tag, an agent or the clock leaves neighbours out as surely as hits.
    assert "chat.session_1.t003" not in context_keys(service, query="favourite board game", tags=["s2"])
    by_agent = context_keys(service, query="favourite board game", agent="chat")
    assert "chat.session_1.t005" not in by_agent and "chat.session_1.t003" in by_agent
    clock.now += 61
    assert "chat.session_1.t004" not in context_keys(service, query="favourite board game", limit=10)


def test_raw_mode_keeps_its_fts_syntax_and_its_errors(make: Any, minilm: MiniLMEmbedder) -> None:
    service = make(lambda db: VectorIndex(db, minilm), Clock())
    store_chat(service)
    raw = json.loads(call(service, "memory_context", query='"board game"', limit=1))
    assert [m["key"] for m in raw] == ["chat.session_1.t002"]
    text, is_error = service.call_tool("memory_context", {"query": "(unbalanced", "limit": 3})
    assert is_error and text.startswith("search failed: ")


def fake_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255.0 for b in digest[:8]]


def test_a_failing_embedder_leaves_bm25_and_no_error(make: Any, api: ApiServer) -> None:
    answers = {"status": 200}

    def embeddings(body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if answers["status"] != 200:
            return answers["status"], {"error": "model crashed"}
        return 200, {"data": [{"index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]}

    api.routes["/v1/embeddings"] = embeddings
    service = make(lambda db: default_vectors(db, url=api.url, provider="openai", model="fake"), Clock())
    store_chat(service)
    assert service.db.query("SELECT COUNT(*) FROM memory_vectors")[0][0] == 5
    answers["status"] = 500
    asked = len(api.requests)
    found = context_keys(service, query="pottery class", limit=2)
    assert found == ["chat.session_2.t001", "chat.session_2.t002"]
    assert len(api.requests) > asked  # the query was sent to the embedder, which failed


FACTS = {
    "deploy": "The deploy pipeline broke because the database migration timed out",
    "editor": "Alice prefers dark mode in her editor",
    "cat": "The cat knocked the plant off the windowsill",
}


def floor_service(
    tmp_path: Path, stores: Stores, minilm: MiniLMEmbedder, min_similarity: float | None
) -> MemoryService:
    root = tmp_path / f"mem7-floor-{min_similarity}"
    service = MemoryService(
        MemoryConfig(dir=str(root), hybrid=True, min_similarity=min_similarity),
        Database(stores.target(root)),
        clock=Clock(),
        vectors=lambda db: VectorIndex(db, minilm),
    )
    for key, value in FACTS.items():
        call(service, "memory_store", key=key, value=value)
    return service


def test_a_query_nothing_matches_finds_nothing_with_embeddings_on(
    tmp_path: Path, stores: Stores, minilm: MiniLMEmbedder
) -> None:
    service = floor_service(tmp_path, stores, minilm, None)
    try:
        assert call(service, "memory_search", query="zebra xylophone quasar", mode="natural") == "No memories found."
        assert json.loads(call(service, "memory_context", query="zebra xylophone quasar", mode="natural")) == []
        # A paraphrase that shares no word with the memory is still found by its meaning.
        assert context_keys(service, query="kitten pushed a flowerpot from the ledge") == ["cat"]
    finally:
        service.close()


def test_the_floor_is_what_keeps_unrelated_memories_out(tmp_path: Path, stores: Stores, minilm: MiniLMEmbedder) -> None:
    service = floor_service(tmp_path, stores, minilm, -1.0)  # no floor: every cosine candidate is a result
    try:
        assert len(context_keys(service, query="zebra xylophone quasar")) == len(FACTS)
    finally:
        service.close()
