from __future__ import annotations

import time
from typing import Any

import pytest

from flux7.shared.memory.rerank import Reranker, default_reranker

from .conftest import ApiServer

CANDIDATES = [(f"k{i}", f"memory text number {i}") for i in range(1, 7)]
FUSED = [key for key, _ in CANDIDATES]


def ollama_answer(text: str) -> Any:
    return lambda body, headers: (200, {"model": body["model"], "response": text, "done": True})


def test_ollama_order_comes_first_and_the_rest_keep_the_fused_order(api: ApiServer) -> None:
    api.routes["/api/generate"] = ollama_answer("[4, 2]")
    reranker = Reranker(api.url, "gemma4:e4b")
    assert reranker.rerank("which one?", CANDIDATES, 4) == ["k4", "k2", "k1", "k3"]
    assert reranker.last_error is None
    path, body, _ = api.requests[0]
    assert path == "/api/generate"
    assert body["model"] == "gemma4:e4b"
    assert body["stream"] is False
    assert "Query: which one?" in body["prompt"]
    assert "[6] memory text number 6" in body["prompt"]


def test_openai_chat_completions_with_bearer_key(api: ApiServer) -> None:
    def chat(body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("authorization") != "Bearer sk-test":
            return 401, {"error": "bad key"}
        return 200, {"choices": [{"message": {"role": "assistant", "content": "Ranking: [3, 6, 1]"}}]}

    api.routes["/v1/chat/completions"] = chat
    reranker = default_reranker(api.url + "/v1", "small-model", "openai", "sk-test")
    assert reranker is not None
    assert reranker.rerank("q", CANDIDATES, 3) == ["k3", "k6", "k1"]
    assert api.requests[0][1]["messages"][0]["role"] == "user"


def test_out_of_range_and_repeated_numbers_are_ignored(api: ApiServer) -> None:
    api.routes["/api/generate"] = ollama_answer("[9, 5, 5, 0, 2]")
    assert Reranker(api.url).rerank("q", CANDIDATES, 6) == ["k5", "k2", "k1", "k3", "k4", "k6"]


@pytest.mark.parametrize(
    "route",
    [
        lambda body, headers: (500, {"error": "model crashed"}),
        lambda body, headers: (200, {"response": "I cannot decide."}),
        lambda body, headers: (200, b"not json"),
        lambda body, headers: (200, {"unexpected": True}),
    ],
    ids=["http-500", "no-numbers", "not-json", "missing-field"],
)
def test_a_failing_model_leaves_the_fused_order(api: ApiServer, route: Any) -> None:
    api.routes["/api/generate"] = route
    reranker = Reranker(api.url)
    assert reranker.rerank("q", CANDIDATES, 4) == FUSED[:4]
    assert reranker.last_error


def test_a_slow_model_is_cut_off_at_the_timeout(api: ApiServer) -> None:
    def stall(body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        api.release.wait(30)  # released at teardown; the client gives up long before
        return 200, {"response": "[6]"}

    api.routes["/api/generate"] = stall
    reranker = Reranker(api.url, timeout=0.3)
    start = time.monotonic()
    assert reranker.rerank("q", CANDIDATES, 3) == FUSED[:3]
    assert time.monotonic() - start < 5
    assert reranker.last_error and "Timeout" in reranker.last_error


def test_an_unreachable_endpoint_leaves_the_fused_order() -> None:
    reranker = Reranker("http://127.0.0.1:9", timeout=2)
    assert reranker.rerank("q", CANDIDATES, 2) == FUSED[:2]
    assert reranker.last_error


def test_no_url_means_no_reranker_and_bad_settings_are_clear_errors() -> None:
    assert default_reranker(None) is None
    assert default_reranker("") is None
    with pytest.raises(ValueError, match="valid: ollama, openai"):
        Reranker("http://127.0.0.1:1", provider="cohere")
    with pytest.raises(ValueError, match="http://"):
        Reranker("127.0.0.1:11434")
