"""The tools' text outputs, byte for byte as the published clients read them (CONTRACT 2.3)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from flux7.shared.memory.index import Fact
from flux7.shared.memory.times import rfc3339
from flux7.shared.memory.workspace import LONG_TERM_FILE, Entry

__all__ = ["context_json", "fact_blocks", "history_lines", "list_text", "search_text"]

NO_MEMORIES = "No memories found."


def _block(f: Fact) -> str:
    text = f"## {f.entity}\n{f.value}"
    if not f.value.endswith("\n"):
        text += "\n"
    if f.tags:
        text += f"Tags: {', '.join(f.tags)}\n"
    if f.agent:
        text += f"Agent: {f.agent}\n"
    return text + f"Updated: {rfc3339(f.updated)}\n\n"


def fact_blocks(facts: Sequence[Fact]) -> str:
    return "".join(map(_block, facts)) if facts else NO_MEMORIES


def search_text(facts: Sequence[Fact]) -> str:
    if not facts:
        return NO_MEMORIES
    return f"{len(facts)} results (ranked by relevance):\n\n" + "".join(map(_block, facts))


def list_text(facts: Sequence[Fact]) -> str:
    if not facts:
        return NO_MEMORIES
    lines = []
    for f in facts:
        tags = f" [{', '.join(f.tags)}]" if f.tags else ""
        agent = f" (by {f.agent})" if f.agent else ""
        lines.append(f"- {f.entity}{tags}{agent} — {rfc3339(f.updated)}\n")
    return f"{len(facts)} memories:\n" + "".join(lines)


class _ContextItem(msgspec.Struct, omit_defaults=True):
    key: str
    value: str
    tags: list[str] | None
    agent: str
    updated: str
    trace_id: str
    valid_from: str
    valid_to: str | None
    tx_from: str
    tx_to: str | None
    long_term: bool = False  # present (true) only on long-term entries: other items stay as published


def context_json(facts: Sequence[Fact]) -> str:
    items = [
        _ContextItem(
            key=f.entity,
            value=f.value,
            tags=f.tags or None,
            agent=f.agent,
            updated=rfc3339(f.updated),
            trace_id=f.trace_id,
            valid_from=rfc3339(f.valid_from),
            valid_to=None if f.valid_to is None else rfc3339(f.valid_to),
            tx_from=rfc3339(f.tx_from),
            tx_to=None if f.tx_to is None else rfc3339(f.tx_to),
            long_term=f.long_term,
        )
        for f in facts
    ]
    return msgspec.json.encode(items).decode()


def _history_line(e: Entry, what: str) -> str:
    line = f"- {rfc3339(e.when)} {what}"
    if e.agent:
        line += f" by {e.agent}"
    if e.valid_from is not None or e.valid_to is not None:
        start = rfc3339(e.valid_from if e.valid_from is not None else e.when)
        end = "open" if e.valid_to is None else rfc3339(e.valid_to)
        line += f" · valid {start} → {end}"
    if e.trace:
        line += f" · trace {e.trace}"
    if e.file == LONG_TERM_FILE:
        line += " · long-term"
    line += f" · seal {e.hash[:12]}" if e.hash else " · unsealed (written before the chain)"
    return line + "\n"


def history_lines(key: str, entries: Sequence[tuple[Entry, str]]) -> str:
    if not entries:
        return "No history."
    return f"History of {key} ({len(entries)} events, oldest first):\n" + "".join(
        _history_line(e, what) for e, what in entries
    )
