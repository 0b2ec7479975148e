"""The eight tools as `tools/list` describes them (CONTRACT 2.2/2.3)."""

from __future__ import annotations

from typing import Any

__all__ = ["TOOLS", "TOOL_NAMES"]


def _p(type_: str, description: str, *, items: str = "", default: Any = None) -> dict[str, Any]:
    prop: dict[str, Any] = {"type": type_, "description": description}
    if items:
        prop["items"] = {"type": items}
    if default is not None:
        prop["default"] = default
    return prop


def _tool(
    name: str, description: str, props: dict[str, dict[str, Any]], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return {"name": name, "description": description, "inputSchema": schema}


_WHEN = {
    "valid_at": _p("string", "What held in the world at this moment (YYYY-MM-DD or RFC3339; default now)"),
    "as_of": _p("string", "What mem7 believed at this moment (YYYY-MM-DD or RFC3339; default now)"),
}
_SEARCH = {
    "query": _p("string", "Search query"),
    "mode": _p("string", "raw (default, FTS5 syntax) or natural (plain language, auto-stemmed)"),
    "tags": _p("array", "Post-filter by tags (AND logic)", items="string"),
    "agent": _p("string", "Post-filter by agent"),
    "since": _p("string", "Lower bound on updated (RFC3339)"),
    "until": _p("string", "Upper bound on updated (RFC3339)"),
    "limit": _p("number", "Max results (default 10)", default=10),
    "include_neighbors": _p("boolean", "Fetch sequential neighbors around matching entries (default false)"),
    "neighbor_radius": _p("number", "How many neighbors to fetch on each side (default 1)", default=1),
    **_WHEN,
}

TOOLS: list[dict[str, Any]] = [
    _tool(
        "memory_store",
        "Store or update a memory entry. If a key already exists, it is updated (upsert).",
        {
            "key": _p("string", "Unique key for this memory"),
            "value": _p("string", "The content to remember (free-form markdown allowed)"),
            "tags": _p("array", "Tags for filtering and grouping", items="string"),
            "agent": _p("string", "Identifier of the agent storing this memory"),
            "ttl": _p("number", "Time-to-live in seconds (0 = permanent)", default=0),
            "valid_from": _p("string", "When the fact starts to hold (YYYY-MM-DD or RFC3339; default now)"),
            "valid_to": _p("string", "When the fact stops holding (YYYY-MM-DD or RFC3339; default open)"),
            "long_term": _p(
                "boolean",
                "Keep it in MEMORY.md: it never expires and is tagged long-term (the tag long-term asks for it "
                "too). An update of a long-term key stays long-term unless long_term is false.",
            ),
        },
        ("key", "value"),
    ),
    _tool(
        "memory_recall",
        "Recall memories by key, tags, or agent. Returns matching entries sorted by most recent.",
        {
            "key": _p("string", "Exact key to recall"),
            "tags": _p("array", "Filter by tags (AND logic: all tags must match)", items="string"),
            "agent": _p("string", "Filter by agent identifier"),
            "limit": _p("number", "Max number of results (default 10)", default=10),
            **_WHEN,
        },
    ),
    _tool(
        "memory_search",
        "Full-text search over memories (SQLite FTS5, field-weighted BM25 with a recency term; hybrid with "
        "dense cosine similarity via RRF when enabled). Raw mode accepts FTS5 operators: foo* prefix, "
        "AND / OR / NOT, quoted phrases.",
        _SEARCH,
        ("query",),
    ),
    _tool(
        "memory_context",
        "Same search as memory_search, returned as a JSON array of {key, value, tags, agent, updated, "
        "trace_id, valid_from, valid_to, tx_from, tx_to} for programmatic use.",
        _SEARCH,
        ("query",),
    ),
    _tool(
        "memory_get",
        "Read a file from the markdown workspace, optionally between from_line and to_line (1-indexed, "
        "inclusive). Paths are relative to the workspace root and refused if they escape it.",
        {
            "path": _p("string", "Workspace-relative path (e.g. memory/2026-04-11.md, or MEMORY.md for long-term)"),
            "from_line": _p("number", "First line to read"),
            "to_line": _p("number", "Last line to read"),
        },
        ("path",),
    ),
    _tool(
        "memory_list",
        "List memory keys with metadata (without values). Useful for browsing what is stored.",
        {
            "tags": _p("array", "Filter by tags (AND logic)", items="string"),
            "agent": _p("string", "Filter by agent identifier"),
            **_WHEN,
        },
    ),
    _tool(
        "memory_forget",
        "Delete memories by key or tags. A tombstone is appended to the workspace; reads as_of an earlier "
        "moment still see them.",
        {
            "key": _p("string", "Exact key to delete"),
            "tags": _p("array", "Delete all entries matching these tags (AND logic)", items="string"),
            "agent": _p("string", "Agent signing the deletion"),
        },
    ),
    _tool(
        "memory_history",
        "The life of one key, oldest first, read from the workspace: every write and deletion with its "
        "author, trace, declared validity and seal.",
        {"key": _p("string", "Exact key")},
        ("key",),
    ),
]

TOOL_NAMES = frozenset(t["name"] for t in TOOLS)
