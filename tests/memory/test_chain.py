"""Tamper evidence (CONTRACT 2.5): verify names the first entry the chain does not vouch for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flux7.shared.memory.service import MemoryService

from .conftest import call


def _fill(service: MemoryService, n: int = 5) -> Path:
    for i in range(n):
        call(service, "memory_store", key=f"k{i}", value=f"value {i}", tags=["t"])
    return service.store.workspace / "memory" / "2026-09-21.md"


def _break(service: MemoryService) -> dict[str, object]:
    result = service.chain()
    assert result["holds"] is False
    brk = result["report"]["break"]
    assert isinstance(brk, dict)
    return brk


def test_the_chain_holds_after_writes_and_counts_entries(make_service: Any) -> None:
    service = make_service(chain_key="secret")
    _fill(service)
    call(service, "memory_forget", key="k1")
    assert service.chain() == {
        "holds": True,
        "report": {"entries": 6, "legacy": 0, "sealed": 6, "keyed": True, "break": None},
    }


def test_an_edited_value_breaks_the_chain_at_that_entry(service: MemoryService) -> None:
    path = _fill(service)
    path.write_text(path.read_text().replace("value 2", "value two"))
    third = list(service.store.entries())[2]
    assert _break(service) == {
        "file": str(path),
        "line": third.line,
        "entity": "k2",
        "reason": "content changed since it was sealed (or it was sealed with a key: set MEM7_CHAIN_KEY)",
    }


def test_a_keyed_chain_says_only_that_content_changed(make_service: Any) -> None:
    service = make_service(chain_key="secret")
    path = _fill(service)
    path.write_text(path.read_text().replace("tags: t", "tags: u", 1))
    assert _break(service)["reason"] == "content changed since it was sealed"
    assert _break(service)["entity"] == "k0"


def test_a_removed_entry_breaks_the_chain_at_its_successor(service: MemoryService) -> None:
    path = _fill(service)
    entries = list(service.store.entries())
    data = path.read_bytes()
    path.write_bytes(data[: entries[1].start] + data[entries[1].end :])
    brk = _break(service)
    assert brk["entity"] == "k2"
    assert brk["reason"] == "does not follow the previous seal: an entry was removed, added or reordered before it"


def test_removing_the_first_entry_leaves_a_missing_predecessor(service: MemoryService) -> None:
    path = _fill(service, 2)
    entries = list(service.store.entries())
    path.write_bytes(path.read_bytes()[entries[0].end :])
    assert _break(service)["reason"] == "the first sealed entry points to a predecessor that is missing"


def test_legacy_entries_count_and_an_unsealed_entry_after_the_chain_breaks_it(
    make_service,
    tmp_path: Path,
) -> None:
    root = tmp_path / "legacy"
    daily = root / "workspace" / "memory" / "2026-01-01.md"
    daily.parent.mkdir(parents=True)
    daily.write_text(
        "\n## old\n\n```mem7\nop: store\ncreated: 2026-01-01T00:00:00Z\n"
        "updated: 2026-01-01T00:00:00Z\n```\n\nold\n\n---\n"
    )
    service = make_service(root)
    assert call(service, "memory_recall", key="old").startswith("## old\nold\n")  # imported at open
    call(service, "memory_store", key="new", value="sealed")
    report = service.chain()["report"]
    assert (report["entries"], report["legacy"], report["sealed"], report["break"]) == (2, 1, 1, None)
    today = service.store.workspace / "memory" / "2026-09-21.md"
    with today.open("a") as fh:
        fh.write("\n## sneaky\n\n```mem7\nop: store\nupdated: 2026-09-21T14:13:20Z\n```\n\nx\n\n---\n")
    call(service, "memory_store", key="after", value="v")  # adopts the hand-written entry first
    brk = _break(service)
    assert (brk["entity"], brk["reason"]) == ("sneaky", "entry without a seal after the chain started")
