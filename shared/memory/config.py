"""The memory role's settings, validated once at its entry point (mem7's CLI, or flux7's Settings)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from flux7.shared import __version__
from flux7.shared.settings import Settings

__all__ = ["MemoryConfig", "config_from_settings"]


class MemoryConfig(msgspec.Struct, frozen=True, kw_only=True):
    dir: str  # holds workspace/ (and index.db under `mem7 serve`)
    database: str = ""  # mem7 alone: a postgresql:// URL instead of <dir>/index.db (MEM7_DATABASE_URL)
    max_entries: int = 10000
    chain_key: str = ""
    token: str = ""  # when set, memory routes require exactly `Authorization: Bearer <token>`
    scopes_file: str = ""
    hybrid: bool = True
    embed_url: str = ""  # empty: the local MiniLM model when installed
    embed_model: str = ""
    embed_provider: str = ""
    embed_key: str = ""
    rerank_url: str = ""  # an LLM (Ollama or OpenAI-compatible) that reorders 3N fused candidates
    rerank_model: str = ""
    min_similarity: float | None = None  # the dense relevance floor; None: the model's own (embed.py)
    text_search_config: str = "simple"  # PostgreSQL: the full-text configuration, simple or english (fts.py)
    version: str = __version__


def config_from_settings(settings: Settings) -> MemoryConfig:
    """flux7 serve: config.yaml's memory block; the workspace defaults to `<dir of storage_path>/memory`."""
    m = settings.memory
    base = settings.resolve_path(settings.storage_path).parent
    directory = settings.resolve_path(m.dir) if m.dir else base / "memory"
    return MemoryConfig(
        dir=str(Path(directory)),
        max_entries=m.max_entries if m.max_entries > 0 else 10000,
        chain_key=m.chain_key,
        token=m.token,
        scopes_file=str(settings.resolve_path(m.scopes)) if m.scopes else "",
        hybrid=m.hybrid,
        embed_url=m.embed_url,
        embed_model=m.embed_model,
        embed_provider=m.embed_provider,
        embed_key=m.embed_key,
        rerank_url=m.rerank_url,
        rerank_model=m.rerank_model,
        min_similarity=m.min_similarity,
        text_search_config=m.text_search_config,
    )
