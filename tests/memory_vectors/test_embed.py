from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flux7.shared.memory.embed import (
    TOKENIZER_PATH,
    EmbeddingUnavailable,
    MiniLMEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    default_embedder,
)


def test_local_embeddings_are_unit_length_float32_rows(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(["The cat sat on the mat.", "Quarterly revenue grew by ten percent.", ""])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_paraphrases_score_higher_than_unrelated_text(minilm: MiniLMEmbedder) -> None:
    cat, kitten, market = minilm.embed(
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "The stock market fell sharply today.",
        ]
    )
    assert float(cat @ kitten) > 0.5
    assert float(cat @ kitten) > float(cat @ market) + 0.3


def test_a_text_embeds_the_same_alone_or_padded_in_a_batch(minilm: MiniLMEmbedder) -> None:
    short = "hello there"
    batch = minilm.embed([short, "a much longer sentence that forces padding of the short one " * 5])
    alone = minilm.embed([short])
    assert np.allclose(batch[0], alone[0], atol=1e-5)


def test_batches_larger_than_one_run_keep_input_order(minilm: MiniLMEmbedder) -> None:
    texts = [f"item number {i} " + "word " * (i % 7) for i in range(70)]
    together = minilm.embed(texts)
    for i in (0, 33, 69):
        assert np.allclose(together[i], minilm.embed([texts[i]])[0], atol=1e-5)


def test_text_is_truncated_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    head = "alpha " * 300  # well past 256 tokens
    a, b = minilm.embed([head + "completely different ending about volcanoes", head + "and something else"])
    assert np.allclose(a, b, atol=1e-6)


def test_empty_input_gives_an_empty_matrix_without_loading() -> None:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder)
    assert embedder.embed([]).shape == (0, 384)
    assert not embedder.loaded


def test_altered_tokenizer_is_refused_at_load(tmp_path: Path, minilm: MiniLMEmbedder) -> None:
    altered = tmp_path / "tokenizer.json"
    shutil.copy(TOKENIZER_PATH, altered)
    with altered.open("a") as f:
        f.write(" ")
    embedder = MiniLMEmbedder(minilm.model_path, altered)
    with pytest.raises(EmbeddingUnavailable, match="sha256"):
        embedder.embed(["anything"])
    assert not embedder.loaded


def test_missing_model_file_is_refused_at_load(tmp_path: Path) -> None:
    embedder = MiniLMEmbedder(tmp_path / "model.onnx")
    with pytest.raises(EmbeddingUnavailable, match="missing"):
        embedder.embed(["anything"])


@pytest.mark.served
def test_importing_memory_vectors_loads_no_model_runtime() -> None:
    code = (
        "import sys; import flux7.shared.memory.vectors, flux7.shared.memory.embed, flux7.shared.memory.retrieval, "
        "flux7.shared.memory.rerank\n"
        "from flux7.shared.memory.embed import default_embedder; default_embedder()\n"
        "print(sorted(m for m in ('onnxruntime', 'tokenizers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_url_selects_a_remote_embedder_named_by_provider_and_model() -> None:
    ollama = default_embedder("http://127.0.0.1:1")
    assert isinstance(ollama, OllamaEmbedder)
    assert ollama.name == "ollama:nomic-embed-text"
    openai = default_embedder("http://127.0.0.1:1/v1", "text-embedding-3-small", "openai", "sk-test")
    assert isinstance(openai, OpenAIEmbedder)
    assert openai.name == "openai:text-embedding-3-small"


def test_an_unknown_provider_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="valid: ollama, openai"):
        default_embedder("http://127.0.0.1:1", provider="cohere")


def test_low_memory_mode_gives_the_same_vectors(minilm: MiniLMEmbedder) -> None:
    lean = MiniLMEmbedder(minilm.model_path, low_memory=True, threads=1)
    texts = ["The cat sat on the mat.", "Budget review moved to Thursday."]
    assert np.allclose(lean.embed(texts), minilm.embed(texts), atol=1e-4)
