"""Group commit (issue 19): concurrent calls' trace rows committed together, each call answered only once its own
row is durable, a failed batch refusing every call in it, and one hash chain across processes that batch."""

from __future__ import annotations

import asyncio
import fcntl
import json
import multiprocessing
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from flux7.shared.errors import Unavailable
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database
from flux7.shared.tracing import TraceEntry, Tracer
from flux7.shared.tracing.chain import verify_files
from tests.support.mesh import PETS_POLICY, mesh_client, pets_mesh_config
from tests.support.waiting import eventually
from tests.tracing import workers
from tests.tracing.conftest import make_settings
from tests.tracing.test_fail_closed import locked
from tests.tracing.test_statement_budget import Counter
from tests.upstreams.servers.http_backend import Backend, running_backend

AGENT = {"Authorization": "Bearer agent:claude"}
CALLS = 32


@pytest.fixture
def backend() -> Iterator[Backend]:
    with running_backend() as b:
        yield b


@pytest.fixture
async def served(tmp_path: Path, backend: Backend) -> AsyncIterator[tuple[Mesh, httpx.AsyncClient]]:
    config = pets_mesh_config(tmp_path, backend, PETS_POLICY, admin_token=None, trace_file=True)
    mesh = Mesh(load_settings(config, env={}))
    async with mesh_client(mesh, AGENT) as client:
        yield mesh, client


async def test_rows_queued_in_one_turn_are_committed_in_one_transaction(tracer: Tracer) -> None:
    group = tracer.store.group
    entries = [TraceEntry(agent_id="a", tool="t", params={"i": i}, policy="allow") for i in range(CALLS)]
    counter = Counter()
    tracer.db.trace_statements(counter)
    written = await asyncio.gather(*(tracer.store.begin_grouped(e) for e in entries))
    rows = [row for row, _ in written]
    statements, commits = counter.take()
    assert (group.batches, group.rows, commits) == (1, CALLS, 1)
    assert group.inline == 0  # the first write saw the other calls ready to run: it waited for them
    # BEGIN, head, lines, rows, head moved (with the counts), COMMIT: as many as for one row (PostgreSQL: and the
    # lock on the chain head row taken first)
    assert statements == (7 if tracer.db.engine == "postgresql" else 6)
    assert len(set(rows)) == CALLS
    # In submission order along the chain, each row pointing at its own line.
    stored = [tracer.store.get(e.trace_id) for _, e in written]
    assert [s.params["i"] for s in stored if s is not None] == list(range(CALLS))
    lines = [json.loads(x) for x in Path(tracer.trace_file or "").read_text().splitlines()]
    assert [x["params"]["i"] for x in lines] == list(range(CALLS)) and [x["seq"] for x in lines] == list(
        range(1, CALLS + 1)
    )
    revised = await asyncio.gather(*(tracer.revise_grouped(r, {"status_code": 200}) for r in rows))
    assert {(e.status_code, e.revision) for e in revised if e is not None} == {(200, 1)} and len(revised) == CALLS
    assert group.batches == 2
    report = tracer.verify()
    assert "break" not in report and report["last_seq"] == 2 * CALLS and "outcome_unknown" not in report


async def test_each_row_of_a_batch_gets_its_own_id_and_its_revision_moves_that_row(tracer: Tracer) -> None:
    # A revision first, so row ids and line numbers part ways (SQLite reads a batch's ids from the insert's last
    # row id, PostgreSQL from RETURNING: either must hand every call the id of its own row).
    row, _ = await tracer.store.begin_grouped(TraceEntry(agent_id="a", tool="t", params={}, policy="allow"))
    await tracer.revise_grouped(row, {"status_code": 200})
    entries = [TraceEntry(agent_id="a", tool="t", params={"i": i}, policy="allow") for i in range(CALLS)]
    written = await asyncio.gather(*(tracer.store.begin_grouped(e) for e in entries))
    stored_ids = dict(tracer.db.query("SELECT trace_id, id FROM traces"))
    assert [row for row, _ in written] == [stored_ids[e.trace_id] for _, e in written]
    await asyncio.gather(*(tracer.revise_grouped(r, {"latency_ms": e.params["i"] + 1}) for r, e in written))
    newest = [tracer.store.get(e.trace_id) for _, e in written]
    assert [(n.params["i"] + 1, n.revision) for n in newest if n is not None] == [(i + 1, 1) for i in range(CALLS)]
    assert [n.latency_ms for n in newest if n is not None] == [i + 1 for i in range(CALLS)]
    assert "break" not in tracer.verify()


async def test_a_write_alone_in_its_turn_is_committed_in_its_callers_step(tracer: Tracer) -> None:
    group = tracer.store.group
    counter = Counter()
    tracer.db.trace_statements(counter)
    # Nothing else ready to run: the write does not wait a loop turn for company that cannot come.
    row, entry = await tracer.store.begin_grouped(TraceEntry(agent_id="a", tool="t", params={}, policy="allow"))
    assert (group.batches, group.rows, group.inline) == (1, 1, 1) and counter.take()[1] == 1  # committed
    stored = tracer.store.get(entry.trace_id)
    assert stored is not None and stored.tool == "t"
    revised = await tracer.revise_grouped(row, {"status_code": 200})
    assert revised is not None and (revised.status_code, group.batches, group.inline) == (200, 2, 2)
    # Two writes queued in one turn still share one commit, whichever comes first.
    both = await asyncio.gather(*(tracer.store.begin_grouped(TraceEntry(agent_id="a", tool=t)) for t in "xy"))
    assert len({r for r, _ in both}) == 2 and (group.batches, group.inline) == (3, 2)


@pytest.mark.served
async def test_a_lone_write_that_cannot_commit_is_refused_in_its_callers_step(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "flux7.db"))
    tracer = Tracer(make_settings(tmp_path), db)
    group = tracer.store.group
    with locked(tmp_path / "flux7.db"), pytest.raises(Unavailable, match="locked"):
        await tracer.store.begin_grouped(TraceEntry(agent_id="a", tool="t", params={}, policy="allow"))
    assert (group.inline, group.batches) == (1, 0) and tracer.counts()["total"] == 0
    await tracer.store.begin_grouped(TraceEntry(agent_id="a", tool="t", params={}, policy="allow"))
    assert (group.inline, group.batches) == (2, 1) and tracer.counts()["total"] == 1
    assert "break" not in tracer.verify()
    db.close()


@pytest.mark.served
async def test_a_lone_call_whose_write_cannot_commit_is_refused(served: tuple[Mesh, httpx.AsyncClient]) -> None:
    mesh, client = served
    group = mesh.tracer.store.group
    with locked(Path(mesh.db.path)):
        r = await client.post("/tool/list_pets", json={"arguments": {}})
    assert r.status_code == 503 and "locked" in r.json()["error"]
    assert group.batches == 0 and mesh.tracer.query(limit=10) == []
    r = await client.post("/tool/list_pets", json={"arguments": {}})
    assert r.status_code == 200, r.text
    assert group.batches == 2 and "break" not in mesh.tracer.verify()


async def test_concurrent_calls_share_commits_and_each_ends_complete(served: tuple[Mesh, httpx.AsyncClient]) -> None:
    mesh, client = served
    group = mesh.tracer.store.group
    counter = Counter()
    mesh.db.trace_statements(counter)
    answers = await asyncio.gather(*(client.post("/tool/list_pets", json={"arguments": {}}) for _ in range(CALLS)))
    mesh.db.trace_statements(None)

    assert [r.status_code for r in answers] == [200] * CALLS
    assert group.rows == 2 * CALLS  # an intent and an outcome each
    statements, commits = counter.take()
    assert group.batches < 2 * CALLS and commits < 2 * CALLS  # one commit per row would be 64
    assert statements < 18 * CALLS  # fewer than the calls made one at a time (test_statement_budget.py)
    entries = mesh.tracer.query(limit=1000)
    assert len(entries) == CALLS and {(e.status_code, e.revision) for e in entries} == {(200, 1)}
    report = mesh.tracer.verify()
    assert "break" not in report and report["last_seq"] == 2 * CALLS and "outcome_unknown" not in report


@pytest.mark.served
async def test_a_batch_that_cannot_commit_refuses_every_call_in_it_and_runs_none(
    served: tuple[Mesh, httpx.AsyncClient], backend: Backend
) -> None:
    mesh, client = served
    before = mesh.tracer.store.head()
    with locked(Path(mesh.db.path)):
        answers = await asyncio.gather(*(client.post("/tool/list_pets", json={"arguments": {}}) for _ in range(8)))
    assert [r.status_code for r in answers] == [503] * 8
    assert all("locked" in r.json()["error"] for r in answers)
    assert not [r for r in backend.requests if r.path == "/pets"]  # no upstream called for a refused intent
    assert mesh.tracer.store.head() == before
    # The store free again, the next call goes through and the chain holds.
    r = await client.post("/tool/list_pets", json={"arguments": {}})
    assert r.status_code == 200, r.text
    assert "break" not in mesh.tracer.verify()


@pytest.mark.served
def test_two_processes_batching_their_own_calls_extend_one_chain(tmp_path: Path) -> None:
    storage, trace_file = str(tmp_path / "flux7.db"), str(tmp_path / "traces.jsonl")
    Database(storage).close()  # migrated once, before the race
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=workers.append_grouped, args=(storage, trace_file, w, 100, start)) for w in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    v = verify_files([trace_file], None)
    assert v.brk is None and (v.first_seq, v.last_seq, v.chained) == (1, 400, 400)
    agents = [json.loads(x)["agent_id"] for x in Path(trace_file).read_text().splitlines()]
    assert agents.count("worker-0") == agents.count("worker-1") == 200
    db = Database(storage)
    tracer = Tracer(make_settings(tmp_path), db)
    assert tracer.counts()["total"] == 200
    report = tracer.verify()
    assert "break" not in report and report["last_seq"] == 400 and "outcome_unknown" not in report
    db.close()


async def test_a_flush_waits_for_another_process_off_the_loop_and_takes_what_queued_meanwhile(tmp_path: Path) -> None:
    """Another worker holding the deployment's write lock does not stop this worker's event loop: the flush waits on
    a helper thread, the loop keeps running, and the writes queued meanwhile are committed in the same batch."""
    storage = str(tmp_path / "flux7.db")
    db = Database(storage)
    tracer = Tracer(make_settings(tmp_path), db)
    group = tracer.store.group
    other = os.open(storage + ".lock", os.O_RDWR)  # its own open file: its lock excludes this store's, as a process's
    fcntl.flock(other, fcntl.LOCK_EX)
    released, seen_waiting = threading.Event(), threading.Event()

    def release_once_seen_waiting() -> None:  # the other worker ends its write once this one waits (or after 5 s)
        seen_waiting.wait(5)
        released.set()  # before the unlock: the flush can finish only after it, so the flag is set by then
        fcntl.flock(other, fcntl.LOCK_UN)

    threading.Thread(target=release_once_seen_waiting, daemon=True).start()
    first = asyncio.ensure_future(tracer.store.begin_grouped(TraceEntry(agent_id="a", tool="t", params={"i": 0})))
    # The loop keeps turning (eventually polls on it) while the lock is taken elsewhere.
    await eventually(lambda: group.waited, 5, "the flush to wait for the lock off the event loop")
    assert group.waited == 1 and not first.done() and not released.is_set()
    entries = [TraceEntry(agent_id="a", tool="t", params={"i": i}) for i in (1, 2)]
    later = [asyncio.ensure_future(tracer.store.begin_grouped(e)) for e in entries]  # queued before the release
    seen_waiting.set()
    written = await asyncio.wait_for(asyncio.gather(first, *later), 10)
    assert released.is_set()
    assert (group.batches, group.rows) == (1, 3)  # the two queued while it waited joined its batch
    assert [tracer.store.get(e.trace_id).params["i"] for _, e in written] == [0, 1, 2]  # type: ignore[union-attr]
    # The lock is free again: another process takes it at once.
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(other, fcntl.LOCK_UN)
    os.close(other)
    await tracer.stop()
    db.close()
