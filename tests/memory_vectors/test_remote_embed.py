from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from flux7.shared.memory.embed import EmbeddingUnavailable, OllamaEmbedder, OpenAIEmbedder, default_embedder
from flux7.shared.memory.vectors import VectorIndex
from flux7.shared.store.db import Database

from .conftest import ApiServer


def vector_of(text: str, dim: int = 8) -> list[float]:
    """A deterministic, unnormalised vector per text, as a real provider would return."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(b) + 1.0 for b in digest[:dim]]


def ollama_embed(body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    return 200, {"model": body["model"], "embeddings": [vector_of(t) for t in body["input"]]}


def test_ollama_batch_endpoint_gives_unit_rows_in_input_order(api: ApiServer) -> None:
    api.routes["/api/embed"] = ollama_embed
    embedder = default_embedder(api.url)
    assert isinstance(embedder, OllamaEmbedder)
    rows = embedder.embed(["alpha", "beta"])
    assert rows.shape == (2, 8) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    expected = np.array(vector_of("beta"), dtype=np.float32)
    assert np.allclose(rows[1], expected / np.linalg.norm(expected), atol=1e-6)
    assert embedder.dim == 8
    path, body, _ = api.requests[0]
    assert (path, body) == ("/api/embed", {"model": "nomic-embed-text", "input": ["alpha", "beta"]})


def test_ollama_without_the_batch_endpoint_falls_back_to_one_prompt_per_call(api: ApiServer) -> None:
    api.routes["/api/embeddings"] = lambda body, headers: (200, {"embedding": vector_of(body["prompt"])})
    embedder = OllamaEmbedder(api.url, "all-minilm")
    rows = embedder.embed(["one", "two", "three"])
    assert rows.shape == (3, 8)
    assert [p for p, _, _ in api.requests] == ["/api/embed", "/api/embeddings", "/api/embeddings", "/api/embeddings"]
    embedder.embed(["four"])  # remembers: no second try of /api/embed
    assert api.requests[-1][0] == "/api/embeddings"


def test_openai_embeddings_send_the_key_and_reorder_by_index(api: ApiServer) -> None:
    def embeddings(body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("authorization") != "Bearer sk-test":
            return 401, {"error": {"message": "invalid key"}}
        data = [{"object": "embedding", "index": i, "embedding": vector_of(t)} for i, t in enumerate(body["input"])]
        return 200, {"object": "list", "data": list(reversed(data)), "model": body["model"]}

    api.routes["/v1/embeddings"] = embeddings
    embedder = default_embedder(api.url + "/v1", "text-embedding-3-small", "openai", "sk-test")
    assert isinstance(embedder, OpenAIEmbedder)
    rows = embedder.embed(["first", "second"])
    expected = np.array(vector_of("first"), dtype=np.float32)
    assert np.allclose(rows[0], expected / np.linalg.norm(expected), atol=1e-6)
    with pytest.raises(EmbeddingUnavailable, match="401"):
        OpenAIEmbedder(api.url, "m", "wrong").embed(["x"])


@pytest.mark.parametrize(
    "route",
    [
        lambda body, headers: (500, {"error": "boom"}),
        lambda body, headers: (200, {"embeddings": [[1.0, 2.0]]}),  # one vector for two texts
        lambda body, headers: (200, {"embeddings": "nope"}),
        lambda body, headers: (200, b"<html>"),
    ],
    ids=["http-500", "wrong-count", "malformed", "not-json"],
)
def test_a_broken_provider_raises_embedding_unavailable(api: ApiServer, route: Any) -> None:
    api.routes["/api/embed"] = route
    with pytest.raises(EmbeddingUnavailable):
        OllamaEmbedder(api.url).embed(["a", "b"])


def test_an_unreachable_provider_raises_embedding_unavailable() -> None:
    with pytest.raises(EmbeddingUnavailable, match=r"ollama embeddings at http://127\.0\.0\.1:9"):
        OllamaEmbedder("http://127.0.0.1:9", timeout=2).embed(["a"])


def test_a_vector_index_works_on_a_remote_embedder(api: ApiServer, db: Database) -> None:
    api.routes["/api/embed"] = ollama_embed
    index = VectorIndex(db, OllamaEmbedder(api.url))
    index.upsert_many([("a", "alpha"), ("b", "beta"), ("c", "gamma")])
    assert index.search("beta", 1)[0][0] == "b"  # the same text gives the same vector: cosine 1
    rows = db.query("SELECT model, dim FROM memory_vectors WHERE key = 'a'")
    assert [tuple(r) for r in rows] == [("ollama:nomic-embed-text", 8)]
