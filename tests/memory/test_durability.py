"""Several writers, crashes and restores: the chain stays whole, acknowledged writes stay, and the index
can always be rebuilt from the markdown (or the markdown from the journal)."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from mem7 import Mem7

from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.service import MemoryService
from flux7.shared.store.db import Database
from tests.memory.stores import Stores

from .conftest import Clock, Mem7Process, call, eventually


def index_rows(db: Database) -> list[tuple[Any, ...]]:
    facts = db.query(
        "SELECT entity, predicate, object, tags, agent, trace_id, ttl, expires_at, source_file, source_line, "
        "created_at, updated_at, deleted_at, valid_from, valid_to, tx_from, tx_to FROM facts ORDER BY id"
    )
    tags = db.query(
        "SELECT f.entity, f.tx_from, t.tag FROM fact_tags t JOIN facts f ON f.id = t.fact_id ORDER BY 1, 2, 3"
    )
    return [tuple(r) for r in facts] + [tuple(r) for r in tags]


def workspace_files(workspace: Path) -> dict[str, bytes]:
    """Every file under the workspace, by workspace-relative path."""
    return {p.relative_to(workspace).as_posix(): p.read_bytes() for p in sorted(workspace.rglob("*")) if p.is_file()}


def busy_history(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="a", value="one\n---\nescaped", tags=["x", "y"], agent="ag", ttl=3600)
    call(service, "memory_store", key="b", value="two", tags=["x"])
    clock.advance(30)
    call(service, "memory_store", key="a", value="uno")
    call(service, "memory_store", key="h", value="Hetzner", valid_from="2026-01-01")
    clock.advance(30)
    call(service, "memory_store", key="h", value="Cloudflare", valid_from="2026-03-20", valid_to="2026-12-31")
    call(service, "memory_forget", tags=["x"])
    call(service, "memory_store", key="c", value="three", ttl=10)
    clock.advance(86400)  # next day: a second daily file
    call(service, "memory_store", key="d", value="four")
    call(service, "memory_forget", key="d")


def test_rescan_rebuilds_the_same_index(service: MemoryService, clock: Clock) -> None:
    busy_history(service, clock)
    before = index_rows(service.db)
    assert len(list((service.store.workspace / "memory").glob("*.md"))) == 2
    assert service.rescan() == 2  # h, and c's TTL has passed
    assert index_rows(service.db) == before
    assert service.chain()["holds"] is True


def test_the_journal_recreates_a_lost_workspace_byte_for_byte(make_service: Any, clock: Clock, tmp_path: Path) -> None:
    service = make_service()
    busy_history(service, clock)
    files = workspace_files(service.store.workspace)
    assert "MEMORY.md" in files and len(files) == 3
    shutil.rmtree(service.store.workspace)
    service.close()
    restored = make_service()  # opening finds the workspace files gone and writes them from the journal
    assert workspace_files(restored.store.workspace) == files
    assert restored.store.export(tmp_path / "copy") == sorted(files)
    assert workspace_files(tmp_path / "copy" / "workspace") == files
    assert restored.chain()["holds"] is True


def test_a_write_that_never_committed_is_adopted_by_the_next_writer(
    make_service: Any, tmp_path: Path, stores: Stores
) -> None:
    root = tmp_path / "crash"
    service = make_service(root)
    call(service, "memory_store", key="before", value="v")
    service.close()
    # The state a writer killed between its append and its commit leaves: the entry in the file, not in the DB.
    old = stores.snapshot(root)
    again = make_service(root)
    call(again, "memory_store", key="orphan", value="appended, never committed")
    again.close()
    stores.restore(root, old)
    after = make_service(root)
    assert call(after, "memory_recall", key="orphan").startswith("## orphan\nappended, never committed\n")
    call(after, "memory_store", key="next", value="v")
    assert after.chain()["report"] == {"entries": 3, "legacy": 0, "sealed": 3, "keyed": False, "break": None}
    rows = index_rows(after.db)
    after.rescan()
    assert index_rows(after.db) == rows


def test_a_torn_entry_is_set_aside_and_the_chain_goes_on(service: MemoryService) -> None:
    call(service, "memory_store", key="a", value="v")
    daily = next((service.store.workspace / "memory").glob("*.md"))
    with daily.open("ab") as fh:
        fh.write(b"\n## half\n\n```mem7\nop: store\ncreat")
    call(service, "memory_store", key="b", value="v")
    assert service.chain()["report"]["sealed"] == 2 and service.chain()["holds"] is True
    (aside,) = (service.store.workspace / "recovered").iterdir()
    assert aside.read_bytes().endswith(b"creat")


@pytest.mark.served
def test_two_workers_writing_at_once_keep_one_chain(tmp_path: Path, stores: Stores) -> None:
    root = tmp_path / "mem7"
    with Mem7Process(root, workers=2, env=stores.env(root)) as server:

        def writer(n: int) -> None:
            m = Mem7(server.url, token="")
            for i in range(20):
                m.store(f"w{n}.k{i:02d}", f"value {n} {i}", tags=[f"w{n}"])

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(writer, range(8)))
        m = Mem7(server.url, token="")
        assert m.list().startswith("160 memories:\n")
        assert m.chain() == {
            "holds": True,
            "report": {"entries": 160, "legacy": 0, "sealed": 160, "keyed": False, "break": None},
        }


@pytest.mark.served
def test_kill_9_loses_no_acknowledged_write(tmp_path: Path, stores: Stores) -> None:
    root = tmp_path / "mem7"
    acked: list[str] = []
    lock = threading.Lock()
    server = Mem7Process(root, workers=2, env=stores.env(root)).start()
    stop = threading.Event()

    def writer(n: int) -> None:
        m = Mem7(server.url, token="", timeout=5)
        i = 0
        while not stop.is_set():
            key = f"k{n}.{i}"
            try:
                m.store(key, f"value {key}")
            except Exception:
                return
            with lock:
                acked.append(key)
            i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    eventually(lambda: len(acked) >= 150, timeout=60, what="150 acknowledged writes")
    server.kill()  # SIGKILL to granian and its workers, mid-write
    stop.set()
    for t in threads:
        t.join(timeout=30)
    with Mem7Process(root, workers=1, env=stores.env(root)) as restarted:
        m = Mem7(restarted.url, token="")
        listed = m.list()
        missing = [k for k in acked if f"- {k} — " not in listed]
        assert missing == []
        assert m.chain()["holds"] is True
    db = Database(stores.target(root))
    rows = index_rows(db)
    rebuilt = MemoryService(MemoryConfig(dir=str(root), hybrid=False), db)
    rebuilt.rescan()
    assert index_rows(db) == rows
    rebuilt.close()


def test_instances_sharing_one_database_keep_one_chain_in_each_workspace(
    tmp_path: Path, clock: Clock, stores: Stores
) -> None:
    """Several instances on one database (PostgreSQL's deployment; two SQLite services on one file alike), each
    with its own workspace directory: a write first copies from the journal what the others appended."""
    target = stores.target(tmp_path / "a")
    a, b = (
        MemoryService(MemoryConfig(dir=str(tmp_path / name), hybrid=False), Database(target), clock=clock)
        for name in ("a", "b")
    )
    try:
        for i in range(6):
            call(a if i % 2 == 0 else b, "memory_store", key=f"k{i}", value=f"value {i}")
            clock.advance(1)
        call(b, "memory_store", key="lt", value="kept", long_term=True)
        call(a, "memory_forget", key="k0")
        call(b, "memory_store", key="k6", value="value 6")  # b first copies a's forget from the journal
        assert workspace_files(a.store.workspace) != workspace_files(b.store.workspace)  # a has not seen k6
        call(a, "memory_store", key="k7", value="value 7")  # a copies b's long-term entry and k6
        assert_last_writer_holds_the_journal(a, 10, tmp_path / "export-a")
        call(b, "memory_store", key="k8", value="value 8")  # b copies k7
        assert_last_writer_holds_the_journal(b, 11, tmp_path / "export-b")
        assert keys_listed(a) == keys_listed(b) == [f"k{i}" for i in range(1, 9)] + ["lt"]
    finally:
        a.close()
        b.close()


def keys_listed(service: MemoryService) -> list[str]:
    return sorted(line.split()[1] for line in call(service, "memory_list").splitlines()[1:])


def assert_last_writer_holds_the_journal(service: MemoryService, entries: int, copy: Path) -> None:
    """The workspace of the instance that wrote last is the journal's, every entry sealed in one chain."""
    report = {"entries": entries, "legacy": 0, "sealed": entries, "keyed": False, "break": None}
    assert service.chain()["report"] == report
    service.store.export(copy)
    assert workspace_files(copy / "workspace") == workspace_files(service.store.workspace)
