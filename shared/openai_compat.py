"""OpenAI-compatible APIs (OpenAI, Ollama's /v1, vLLM, LM Studio...): where an endpoint is, given the URL a user
configured. Users write the server (`http://host:8000`), the API base (`http://host:8000/v1`) or the endpoint's own
URL; all three must reach the same place."""

from __future__ import annotations

__all__ = ["openai_path"]


def openai_path(base: str, endpoint: str) -> str:
    """What to append to `base` (without a trailing slash) to reach `endpoint` (`chat/completions`, `embeddings`)."""
    if base.endswith(f"/{endpoint}"):
        return ""
    return f"/{endpoint}" if base.endswith("/v1") else f"/v1/{endpoint}"
