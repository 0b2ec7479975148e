"""Optional LLM reranking of fused search candidates (Ollama `/api/generate` or OpenAI-compatible chat).

The caller passes about 3N candidates in fused order and gets N keys back. The model is asked for the passage
numbers, best first; the numbers it names come first, the rest keep the fused order. Any failure (unreachable,
slow past the timeout, an HTTP error, an answer without usable numbers) gives the fused order unchanged: reranking
may improve a search, never break it. Settings (MEM7_RERANK_URL/MODEL) come in as arguments.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx

from flux7.shared.openai_compat import openai_path

__all__ = ["DEFAULT_RERANK_MODEL", "Reranker", "default_reranker"]

log = logging.getLogger("flux7.memory.rerank")

DEFAULT_RERANK_MODEL = "gemma4:e4b"  # CONTRACT 2.8: MEM7_RERANK_MODEL's default
PASSAGE_CHARS = 600  # enough for a memory's gist; keeps a 30-passage prompt small

_PROMPT = """You rank memories by how useful each is for answering a query.
Reply with the passage numbers only, most useful first, as a JSON array such as [3, 1, 2].
Leave out passages that do not help.

Query: {query}

Passages:
{passages}
"""


class Reranker:
    def __init__(
        self,
        url: str,
        model: str = DEFAULT_RERANK_MODEL,
        provider: str = "ollama",
        key: str = "",
        *,
        timeout: float = 10.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"rerank url must start with http:// or https://, got {url!r}")
        if provider not in ("ollama", "openai"):
            raise ValueError(f"unknown rerank provider {provider!r} (valid: ollama, openai)")
        self.url = url.rstrip("/")
        self.model = model or DEFAULT_RERANK_MODEL
        self.provider = provider
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self.last_error: str | None = None  # why the last call fell back to the fused order, for diagnostics

    def rerank(self, query: str, candidates: list[tuple[str, str]], limit: int) -> list[str]:
        """Keys of `candidates` ((key, text) in fused order), reordered by the model, at most `limit`."""
        fused = [key for key, _ in candidates]
        if limit <= 0 or not candidates:
            return []
        self.last_error = None
        passages = "\n".join(
            f"[{i}] {' '.join(text.split())[:PASSAGE_CHARS]}" for i, (_, text) in enumerate(candidates, start=1)
        )
        prompt = _PROMPT.format(query=query, passages=passages)
        try:
            answer = self._complete(prompt)
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
            return self._fallback(fused, limit, f"{type(e).__name__}: {e}")
        chosen: list[int] = []
        for number in re.findall(r"\d+", answer):
            i = int(number)
            if 1 <= i <= len(candidates) and i - 1 not in chosen:
                chosen.append(i - 1)
        if not chosen:
            return self._fallback(fused, limit, f"no passage numbers in the answer: {answer[:200]!r}")
        picked = set(chosen)
        order = [fused[i] for i in chosen] + [key for i, key in enumerate(fused) if i not in picked]
        return order[:limit]

    def _fallback(self, fused: list[str], limit: int, why: str) -> list[str]:
        self.last_error = why
        log.warning("rerank at %s skipped, fused order kept: %s", self.url, why)
        return fused[:limit]

    def _complete(self, prompt: str) -> str:
        if self.provider == "ollama":
            data = self._post(
                "/api/generate",
                {"model": self.model, "prompt": prompt, "stream": False, "options": {"temperature": 0}},
            )
            return str(data["response"])
        data = self._post(
            openai_path(self.url, "chat/completions"),
            {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0},
        )
        return str(data["choices"][0]["message"]["content"])

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = self._client.post(self.url + path, json=body)
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        self._client.close()


def default_reranker(
    url: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    key: str | None = None,
    *,
    timeout: float = 10.0,
) -> Reranker | None:
    """The reranker the settings ask for (MEM7_RERANK_URL/MODEL), or None when no url is set."""
    if not url:
        return None
    return Reranker(url, model or DEFAULT_RERANK_MODEL, (provider or "ollama").lower(), key or "", timeout=timeout)
