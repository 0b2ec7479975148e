"""Long-term memory in workspace/MEMORY.md: created on init, written by `long_term` or the tag `long-term`,
indexed and searched like the daily files, never expired, sealed into the one chain."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mem7 import Mem7
from mem7.client import Mem7Error

from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.workspace import LONG_TERM_HEADER, parse_entries
from tests.memory.stores import Stores
from tests.support.server import running_server

from .conftest import Clock, Mem7Process, call, fail
from .test_durability import index_rows, workspace_files

DAY = "memory/2026-09-21.md"


def files(service: MemoryService) -> tuple[str, str]:
    """(MEMORY.md, today's daily file) as text ("" when the daily file does not exist)."""
    ws = service.store.workspace
    daily = ws / DAY
    return (ws / "MEMORY.md").read_text(), daily.read_text() if daily.exists() else ""


def mixed_history(service: MemoryService, clock: Clock) -> None:
    """Daily and long-term writes interleaved, keys moving both ways within one second, over two days."""
    call(service, "memory_store", key="pref", value="dark mode", long_term=True, agent="ag")
    call(service, "memory_store", key="tmp", value="session", ttl=60)
    call(service, "memory_store", key="moving", value="daily first", tags=["x"])
    call(service, "memory_store", key="moving", value="now long-term", long_term=True)  # same second
    call(service, "memory_store", key="moving", value="back to daily", tags=["x"], long_term=False)  # same second
    call(service, "memory_store", key="host", value="Hetzner", tags=["long-term"], valid_from="2026-01-01")
    clock.advance(30)
    call(service, "memory_store", key="host", value="Cloudflare", valid_from="2026-03-20")  # stays long-term
    call(service, "memory_store", key="gone", value="bye", long_term=True, tags=["x"])
    call(service, "memory_forget", key="gone")
    clock.advance(86400)  # a second daily file
    call(service, "memory_store", key="late", value="next day", long_term=True)
    call(service, "memory_forget", tags=["x"])  # removes `moving` (daily) by tags
    call(service, "memory_store", key="d", value="daily again")


def test_init_creates_memory_md_with_a_header_that_holds_no_entries(service: MemoryService) -> None:
    path = service.store.workspace / "MEMORY.md"
    assert path.read_bytes() == LONG_TERM_HEADER
    parsed = parse_entries(path.read_bytes(), "MEMORY.md")
    assert (parsed.entries, parsed.torn) == ([], False)
    assert call(service, "memory_get", path="MEMORY.md").startswith("# MEMORY.md: long-term memory\n")
    assert service.chain()["report"] == {"entries": 0, "legacy": 0, "sealed": 0, "keyed": False, "break": None}
    assert call(service, "memory_list") == "No memories found."


def test_the_tool_schema_documents_the_flag(service: MemoryService) -> None:
    store = next(t for t in service.tools if t["name"] == "memory_store")
    assert store["inputSchema"]["properties"]["long_term"]["type"] == "boolean"
    assert "MEMORY.md" in store["inputSchema"]["properties"]["long_term"]["description"]


def test_a_long_term_store_goes_to_memory_md_and_is_marked_in_every_output(service: MemoryService) -> None:
    assert call(service, "memory_store", key="pref", value="prefers dark mode", long_term=True, agent="me") == (
        "Memory 'pref' created (1 total entries)"
    )
    call(service, "memory_store", key="note", value="a dark corner", agent="me")
    long_md, daily = files(service)
    assert "\n## pref\n\n```mem7\nop: store\nagent: me\ntags: long-term\n" in long_md
    assert long_md.startswith(LONG_TERM_HEADER.decode())
    assert "## pref" not in daily and "\n## note\n" in daily
    recalled = call(service, "memory_recall", key="pref")
    assert recalled == "## pref\nprefers dark mode\nTags: long-term\nAgent: me\nUpdated: 2026-09-21T14:13:20Z\n\n"
    # A daily entry's text is exactly as published: no mark, no extra field.
    assert call(service, "memory_recall", key="note") == (
        "## note\na dark corner\nAgent: me\nUpdated: 2026-09-21T14:13:20Z\n\n"
    )
    found = call(service, "memory_search", query="dark")
    assert (
        found.startswith("2 results (ranked by relevance):\n\n")
        and "## pref\nprefers dark mode\nTags: long-term\n" in found
    )
    assert call(service, "memory_list") == (
        "2 memories:\n- note (by me) — 2026-09-21T14:13:20Z\n- pref [long-term] (by me) — 2026-09-21T14:13:20Z\n"
    )
    assert "pref" in call(service, "memory_list", tags=["long-term"]) and "note" not in call(
        service, "memory_list", tags=["long-term"]
    )
    items = {i["key"]: i for i in json.loads(call(service, "memory_context", query="dark", mode="natural"))}
    assert items["pref"]["long_term"] is True and items["pref"]["tags"] == ["long-term"]
    assert list(items["note"]) == [
        "key", "value", "tags", "agent", "updated", "trace_id", "valid_from", "valid_to", "tx_from", "tx_to",
    ]  # fmt: skip
    (line,) = call(service, "memory_history", key="pref").splitlines()[1:]
    assert line.startswith("- 2026-09-21T14:13:20Z store by me · long-term · seal ")
    assert "long-term" not in call(service, "memory_history", key="note")


def test_the_tag_alone_asks_for_long_term(service: MemoryService) -> None:
    call(service, "memory_store", key="k", value="v", tags=["team", "long-term"])
    long_md, daily = files(service)
    assert "\n## k\n" in long_md and "tags: team, long-term\n" in long_md and daily == ""


def test_refusals_are_clear(service: MemoryService) -> None:
    assert fail(service, "memory_store", key="k", value="v", long_term=True, ttl=60) == (
        "a long-term memory never expires: ttl must be 0"
    )
    assert fail(service, "memory_store", key="k", value="v", tags=["long-term"], ttl=60) == (
        "a long-term memory never expires: ttl must be 0"
    )
    assert fail(service, "memory_store", key="k", value="v", long_term="yes") == "long_term must be true or false"
    assert fail(service, "memory_store", key="k", value="v", long_term=False, tags=["long-term"]) == (
        "long_term is false but the tags include long-term"
    )
    call(service, "memory_store", key="k", value="v", long_term=True)
    assert fail(service, "memory_store", key="k", value="w", ttl=60) == (
        "a long-term memory never expires: ttl must be 0 (the key is long-term: pass long_term false to move it out)"
    )
    assert call(service, "memory_recall", key="k").startswith("## k\nv\n")  # nothing refused was written


def test_an_update_stays_long_term_until_moved_out(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="k", value="one", long_term=True)
    clock.advance(1)
    assert call(service, "memory_store", key="k", value="two", tags=["t"]) == "Memory 'k' updated (1 total entries)"
    assert call(service, "memory_recall", key="k").startswith("## k\ntwo\nTags: t, long-term\n")
    assert "\ntwo\n" in files(service)[0]
    clock.advance(1)
    call(service, "memory_store", key="k", value="three", tags=["t"], long_term=False, ttl=60)
    long_md, daily = files(service)
    assert "three" not in long_md and "\n## k\n" in daily and "ttl: 60" in daily
    assert call(service, "memory_recall", key="k").startswith("## k\nthree\nTags: t\n")
    clock.advance(1)
    call(service, "memory_store", key="k", value="four")  # a daily key stays daily
    assert "four" in files(service)[1]
    events = call(service, "memory_history", key="k").splitlines()[1:]
    assert [(" · long-term" in e, e.split()[2]) for e in events] == [
        (True, "store"),
        (True, "update"),
        (False, "update"),
        (False, "update"),
    ]


def test_long_term_entries_outlive_ttl_and_prune(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="keep", value="forever", long_term=True)
    call(service, "memory_store", key="brief", value="soon gone", ttl=60)
    clock.advance(10 * 365 * 86400)
    assert service.store.prune() == 1
    assert call(service, "memory_list").startswith("1 memories:\n- keep [long-term]")
    assert "forever" in call(service, "memory_search", query="forever")
    assert service.store.count() == 1


def test_forget_writes_the_tombstone_to_memory_md(service: MemoryService) -> None:
    call(service, "memory_store", key="k", value="v", long_term=True)
    assert call(service, "memory_forget", key="k") == "Removed 1 memory(ies). 0 remaining."
    long_md, daily = files(service)
    assert long_md.count("\n## k\n") == 2 and "op: delete\n" in long_md and daily == ""
    assert call(service, "memory_recall", key="k") == "No memories found."
    assert call(service, "memory_history", key="k").splitlines()[2].split()[2] == "delete"
    call(service, "memory_store", key="k", value="again")  # after a forget a key starts afresh: daily
    assert "again" in files(service)[1]
    call(service, "memory_store", key="t", value="tagged", tags=["team"], long_term=True)
    assert call(service, "memory_forget", tags=["team"]) == "Removed 1 memory(ies). 1 remaining."
    assert "\n## [delete-tags: team]\n" in files(service)[1]  # forget by tags: one tombstone, in the daily file
    assert call(service, "memory_recall", key="t") == "No memories found."
    assert service.chain()["holds"] is True


def test_one_chain_across_both_files_verifies_rescans_and_exports(
    make_service: Any, clock: Clock, tmp_path: Path
) -> None:
    service = make_service()
    mixed_history(service, clock)
    report = service.chain()["report"]
    assert report == {"entries": 12, "legacy": 0, "sealed": 12, "keyed": False, "break": None}
    before = index_rows(service.db)
    assert service.rescan() == 4  # pref, host, late, d (tmp's ttl has passed, moving and gone are forgotten)
    assert index_rows(service.db) == before
    kept = workspace_files(service.store.workspace)
    assert sorted(kept) == ["MEMORY.md", "memory/2026-09-21.md", "memory/2026-09-22.md"]
    shutil.rmtree(service.store.workspace)
    service.close()
    restored = make_service()  # re-created from the journal, MEMORY.md included
    assert workspace_files(restored.store.workspace) == kept
    assert restored.store.export(tmp_path / "copy") == sorted(kept)
    assert workspace_files(tmp_path / "copy" / "workspace") == kept
    assert restored.chain()["holds"] is True
    assert index_rows(restored.db) == before


def test_rescan_journals_every_byte_so_export_gives_the_files_back(make_service: Any, clock: Clock) -> None:
    service = make_service()
    mixed_history(service, clock)
    ws = service.store.workspace
    with (ws / DAY).open("ab") as fh:  # text between entries is no entry, but it is part of the file
        fh.write(b"a note typed into the first daily file\n")
    with (ws / "MEMORY.md").open("ab") as fh:
        fh.write(b"\nand one typed into MEMORY.md\n")
    service.rescan()
    assert service.chain()["holds"] is True
    kept = workspace_files(ws)
    shutil.rmtree(ws)
    service.close()
    assert workspace_files(make_service().store.workspace) == kept


def test_rescan_of_a_workspace_the_database_never_saw(make_service: Any, clock: Clock, tmp_path: Path) -> None:
    first = make_service(tmp_path / "a")
    mixed_history(first, clock)
    rows = index_rows(first.db)
    first.close()
    shutil.copytree(tmp_path / "a" / "workspace", tmp_path / "b" / "workspace")
    second = make_service(tmp_path / "b")  # a fresh index.db: open() rescans the copied workspace
    assert index_rows(second.db) == rows
    call(second, "memory_store", key="more", value="v", long_term=True)
    assert second.chain()["holds"] is True


def test_a_memory_md_edit_breaks_the_chain_there_and_its_removal_at_the_successor(
    make_service: Any, clock: Clock
) -> None:
    service = make_service()
    call(service, "memory_store", key="a", value="daily a")
    call(service, "memory_store", key="b", value="long b", long_term=True)
    call(service, "memory_store", key="c", value="daily c")
    path = service.store.workspace / "MEMORY.md"
    original = path.read_text()
    path.write_text(original.replace("long b", "LONG B"))
    brk = service.chain()["report"]["break"]
    assert (brk["file"], brk["entity"], brk["reason"]) == (
        str(path),
        "b",
        "content changed since it was sealed (or it was sealed with a key: set MEM7_CHAIN_KEY)",
    )
    path.write_bytes(LONG_TERM_HEADER)  # the long-term entry removed: its successor, in the daily file, breaks
    brk = service.chain()["report"]["break"]
    assert (brk["file"], brk["entity"]) == (str(service.store.workspace / DAY), "c")
    assert brk["reason"].startswith("does not follow the previous seal")


def test_a_crashed_writers_entries_in_both_files_are_adopted_in_seal_order(
    make_service: Any, clock: Clock, tmp_path: Path, stores: Stores
) -> None:
    root = tmp_path / "crash"
    service = make_service(root)
    call(service, "memory_store", key="before", value="v", long_term=True)
    service.close()
    old = stores.snapshot(root)
    again = make_service(root)
    # Appended but (once the old database is back) never committed: daily, long-term, daily, in that order.
    # `k` moves into MEMORY.md within the same second: only the seal order says which version is current.
    call(again, "memory_store", key="k", value="daily one")
    call(again, "memory_store", key="k", value="long one", long_term=True)
    call(again, "memory_store", key="d2", value="daily two")
    again.close()
    stores.restore(root, old)
    after = make_service(root)
    assert call(after, "memory_recall", key="k").startswith("## k\nlong one\nTags: long-term\n")
    assert call(after, "memory_list").startswith("3 memories:\n")
    assert [e.split()[2] for e in call(after, "memory_history", key="k").splitlines()[1:]] == ["store", "update"]
    call(after, "memory_store", key="next", value="v", long_term=True)  # sealed after d2, the real head
    assert after.chain()["report"] == {"entries": 5, "legacy": 0, "sealed": 5, "keyed": False, "break": None}
    rows = index_rows(after.db)
    after.rescan()
    assert index_rows(after.db) == rows
    kept = workspace_files(after.store.workspace)
    after.store.export(tmp_path / "copy")
    assert workspace_files(tmp_path / "copy" / "workspace") == kept


def test_a_torn_long_term_entry_is_set_aside(service: MemoryService) -> None:
    call(service, "memory_store", key="a", value="v", long_term=True)
    with (service.store.workspace / "MEMORY.md").open("ab") as fh:
        fh.write(b"\n## half\n\n```mem7\nop: store\ncreat")
    call(service, "memory_store", key="b", value="v", long_term=True)
    assert service.chain()["report"]["sealed"] == 2 and service.chain()["holds"] is True
    (aside,) = (service.store.workspace / "recovered").iterdir()
    assert aside.name.startswith("MEMORY.") and aside.read_bytes().endswith(b"creat")


def test_a_database_from_before_memory_md_gets_one(make_service: Any, tmp_path: Path) -> None:
    root = tmp_path / "old"
    service = make_service(root)
    call(service, "memory_store", key="a", value="v")
    with service.db.write() as conn:  # the state an index.db from before MEMORY.md existed is in
        conn.execute("DELETE FROM memory_journal WHERE file = 'MEMORY.md'")
        conn.execute("DELETE FROM memory_files WHERE name = 'MEMORY.md'")
    service.close()
    (root / "workspace" / "MEMORY.md").unlink()
    upgraded = make_service(root)
    assert (root / "workspace" / "MEMORY.md").read_bytes() == LONG_TERM_HEADER
    call(upgraded, "memory_store", key="b", value="v", long_term=True)
    assert upgraded.chain()["holds"] is True
    assert upgraded.store.export(tmp_path / "copy") == ["MEMORY.md", DAY]
    assert workspace_files(tmp_path / "copy" / "workspace") == workspace_files(root / "workspace")


# --- the published SDK (flux7-memory 0.8.0) against a real `mem7 serve`: the tag reaches the feature ---


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, stores: Stores) -> Iterator[Mem7Process]:
    root = tmp_path_factory.mktemp("lt") / "mem7"
    with Mem7Process(root, token="lt", env=stores.env(root)) as proc:
        yield proc


@pytest.mark.served
def test_the_sdk_stores_long_term_with_the_tag(server: Mem7Process) -> None:
    m = Mem7(server.url, token="lt", timeout=10)
    assert m.store("sdk.pref", "prefers tea over coffee", tags=["long-term"], agent="sdk") == (
        "Memory 'sdk.pref' created (1 total entries)"
    )
    m.store("sdk.daily", "coffee at nine", agent="sdk")
    (found,) = [x for x in m.context("tea", limit=5) if x.key == "sdk.pref"]
    assert found.tags == ["long-term"] and found.value == "prefers tea over coffee"
    assert "\n## sdk.pref\n" in m.get("MEMORY.md") and "sdk.daily" not in m.get("MEMORY.md")
    assert m.list(tags=["long-term"]).startswith("1 memories:\n- sdk.pref [long-term] (by sdk) — ")
    with pytest.raises(Mem7Error, match="a long-term memory never expires"):
        m.store("sdk.pref", "with a ttl", ttl=60)
    assert m.store("sdk.pref", "prefers green tea").startswith("Memory 'sdk.pref' updated")
    assert m.history("sdk.pref")[-1].what == "update"
    assert m.forget(key="sdk.pref") == "Removed 1 memory(ies). 1 remaining."
    assert m.get("MEMORY.md").count("\n## sdk.pref\n") == 3
    assert m.chain() == {
        "holds": True,
        "report": {"entries": 4, "legacy": 0, "sealed": 4, "keyed": False, "break": None},
    }


@pytest.mark.served
def test_the_sdk_reaches_long_term_memory_under_flux7_serve(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"storage_path: {tmp_path}/flux7.db\n")
    with running_server(config) as server:
        m = Mem7(server.url, token="", timeout=10)
        assert m.store("ops.oncall", "Alice owns the pager", tags=["long-term"]) == (
            "Memory 'ops.oncall' created (1 total entries)"
        )
        assert "## ops.oncall\nAlice owns the pager\nTags: long-term\n" in m.search("pager")
        assert m.chain()["holds"] is True
    long_md = (tmp_path / "memory" / "workspace" / "MEMORY.md").read_text()
    assert long_md.startswith(LONG_TERM_HEADER.decode()) and "\n## ops.oncall\n" in long_md
