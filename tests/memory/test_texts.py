"""The eight tools' text outputs, byte for byte (CONTRACT 2.3): what the SDK and the mesh parse."""

from __future__ import annotations

import json
from typing import Any

from flux7.shared.memory.service import MemoryService

from .conftest import Clock, call, fail

NOW = "2026-09-21T14:13:20Z"
LATER = "2026-09-21T14:14:20Z"


def test_store_says_created_then_updated_with_the_total(service: MemoryService) -> None:
    assert call(service, "memory_store", key="a", value="one") == "Memory 'a' created (1 total entries)"
    assert call(service, "memory_store", key="b", value="two") == "Memory 'b' created (2 total entries)"
    assert call(service, "memory_store", key="a", value="uno") == "Memory 'a' updated (2 total entries)"


def test_store_refuses_missing_key_or_value_and_a_full_memory(make_service: Any) -> None:
    service = make_service(max_entries=2)
    assert fail(service, "memory_store", key="a") == "key and value are required"
    assert fail(service, "memory_store", value="v") == "key and value are required"
    assert fail(service, "memory_store", key="a", value=3) == "key and value are required"
    call(service, "memory_store", key="a", value="1")
    call(service, "memory_store", key="b", value="2")
    assert fail(service, "memory_store", key="c", value="3") == "memory full: 2 entries (max 2)"
    # an update of an existing key still fits
    assert call(service, "memory_store", key="a", value="x") == "Memory 'a' updated (2 total entries)"


def test_recall_blocks_are_heading_value_tags_agent_updated(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="user.prefs", value="prefers dark mode", tags=["user", "ui"], agent="claude")
    clock.advance(60)
    call(service, "memory_store", key="plain", value="ends with newline\n")
    assert call(service, "memory_recall") == (
        f"## plain\nends with newline\nUpdated: {LATER}\n\n"
        f"## user.prefs\nprefers dark mode\nTags: user, ui\nAgent: claude\nUpdated: {NOW}\n\n"
    )
    assert call(service, "memory_recall", key="nope") == "No memories found."
    assert call(service, "memory_recall", limit=1).startswith("## plain\n")


def test_upsert_keeps_created_and_the_agent_when_none_is_given(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="k", value="v1", agent="scout7")
    clock.advance(60)
    call(service, "memory_store", key="k", value="v2")
    (item,) = json.loads(call(service, "memory_context", query="v2"))
    assert (item["agent"], item["updated"]) == ("scout7", LATER)
    entry = service.store.index.head(service.db.reader, "k", int(clock()))
    assert entry is not None and entry.created == int(clock()) - 60


def test_search_header_and_blocks(service: MemoryService) -> None:
    call(service, "memory_store", key="deploy.host", value="the host is Cloudflare", tags=["infra"])
    assert call(service, "memory_search", query="cloudflare") == (
        f"1 results (ranked by relevance):\n\n## deploy.host\nthe host is Cloudflare\nTags: infra\nUpdated: {NOW}\n\n"
    )
    assert call(service, "memory_search", query="nothing") == "No memories found."
    assert fail(service, "memory_search", query="  ") == "query is required"


def test_context_is_a_json_array_with_null_tags_when_none(service: MemoryService) -> None:
    call(service, "memory_store", key="k", value="hello world", agent="bob")
    assert json.loads(call(service, "memory_context", query="hello")) == [
        {
            "key": "k",
            "value": "hello world",
            "tags": None,
            "agent": "bob",
            "updated": NOW,
            "trace_id": "",
            "valid_from": NOW,
            "valid_to": None,
            "tx_from": NOW,
            "tx_to": None,
        }
    ]
    assert call(service, "memory_context", query="absent") == "[]"


def test_list_lines_use_an_em_dash_and_have_no_limit(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="decision.x.1", value="approved", tags=["decision", "approved"], agent="m")
    clock.advance(60)
    call(service, "memory_store", key="plain", value="v")
    assert call(service, "memory_list") == (
        f"2 memories:\n- plain — {LATER}\n- decision.x.1 [decision, approved] (by m) — {NOW}\n"
    )
    assert call(service, "memory_list", tags=["nope"]) == "No memories found."
    for i in range(12):
        call(service, "memory_store", key=f"n{i}", value="v")
    assert call(service, "memory_list").startswith("14 memories:\n")


def test_forget_texts_and_the_tombstone_is_always_written(service: MemoryService) -> None:
    call(service, "memory_store", key="a", value="1", tags=["t"])
    call(service, "memory_store", key="b", value="2", tags=["t", "u"])
    call(service, "memory_store", key="c", value="3")
    assert fail(service, "memory_forget") == "key or tags required"
    assert call(service, "memory_forget", key="a") == "Removed 1 memory(ies). 2 remaining."
    assert call(service, "memory_forget", key="a") == "No matching memories found."
    assert call(service, "memory_forget", tags=["t", "u"]) == "Removed 1 memory(ies). 1 remaining."
    ops = [e.op for e in service.store.entries()]
    assert ops == ["store", "store", "store", "delete", "delete", "delete_tags"]


def test_get_reads_lines_and_refuses_escapes(service: MemoryService) -> None:
    call(service, "memory_store", key="k", value="v")
    name = next(service.store.entries()).file
    lines = (service.store.workspace / name).read_text().splitlines()
    assert call(service, "memory_get", path=name) == "".join(line + "\n" for line in lines)
    assert call(service, "memory_get", path=name, from_line=2, to_line=3) == f"{lines[1]}\n{lines[2]}\n"
    assert call(service, "memory_get", path=name, from_line=500) == "(empty range)"
    assert fail(service, "memory_get", path="memory/none.md") == "file not found: memory/none.md"
    assert fail(service, "memory_get") == "path is required"
    for escape in ("../index.db", "memory/../../index.db", "/etc/passwd", "../../../../etc/passwd"):
        assert fail(service, "memory_get", path=escape) == "path escapes workspace"


def test_get_refuses_a_symlink_that_leads_out_of_the_workspace(service: MemoryService) -> None:
    link = service.store.workspace / "memory" / "out.md"
    link.symlink_to(service.store.root / "index.db")
    assert fail(service, "memory_get", path="memory/out.md") == "path escapes workspace"


def test_history_lines_oldest_first_with_author_validity_trace_and_seal(service: MemoryService, clock: Clock) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    meta = {"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}
    service.call_tool("memory_store", {"key": "h", "value": "v1", "agent": "a1", "tags": ["x"]}, meta=meta)
    clock.advance(60)
    call(service, "memory_store", key="h", value="v2", valid_from="2026-03-20", valid_to="2027-01-01")
    call(service, "memory_forget", tags=["zz"])  # does not touch h
    call(service, "memory_forget", key="h", agent="ops")
    seals = [e.hash[:12] for e in service.store.entries() if e.entity == "h"]
    assert call(service, "memory_history", key="h") == (
        "History of h (3 events, oldest first):\n"
        f"- {NOW} store by a1 · trace {trace} · seal {seals[0]}\n"
        f"- {LATER} update by a1 · valid 2026-03-20T00:00:00Z → 2027-01-01T00:00:00Z · seal {seals[1]}\n"
        f"- {LATER} delete by ops · seal {seals[2]}\n"
    )
    assert call(service, "memory_history", key="never") == "No history."


def test_history_shows_a_delete_by_tags_that_removed_the_key(service: MemoryService) -> None:
    call(service, "memory_store", key="h", value="v", tags=["a", "b"])
    call(service, "memory_forget", tags=["b", "a"])
    lines = call(service, "memory_history", key="h").splitlines()
    assert lines[2].split(" · ")[0] == f"- {NOW} delete by tags b, a"


def test_unknown_tool_is_a_tool_error(service: MemoryService) -> None:
    assert service.call_tool("memory_nope", {}) == ("unknown tool: memory_nope", True)
