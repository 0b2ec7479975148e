"""Functions run in child processes by the multi-process tests (importable under the spawn start method)."""

from __future__ import annotations

from typing import Any


def append_traces(storage: str, trace_file: str, worker: int, count: int, max_file_bytes: int, start: Any) -> None:
    from flux7.shared.settings import load_settings
    from flux7.shared.store.db import Database
    from flux7.shared.tracing import TraceEntry, Tracer

    settings = load_settings(None, env={}, storage_path=storage, trace_file=trace_file)
    db = Database(storage)
    tracer = Tracer(settings, db, max_file_bytes=max_file_bytes)
    start.wait(30)  # both processes begin together, so their writes interleave
    for i in range(count):
        tracer.record(TraceEntry(agent_id=f"worker-{worker}", tool="t.call", params={"i": i}, policy="allow"))
    db.close()


def bump_counters(storage: str, count: int, start: Any) -> None:
    from flux7.shared.metrics import Metrics
    from flux7.shared.store.db import Database

    db = Database(storage)
    metrics = Metrics(db)
    start.wait(30)
    for _ in range(count):
        metrics.inc("mem7_writes_attempted_total")
        metrics.observe("upstream_latency_seconds", 0.2)
    db.close()


def distinct_tools(storage: str, worker: int, count: int, cap: int, start: Any) -> None:
    """`count` calls, each to a tool of its own, with a cap of `cap` tools shared by every process."""
    from flux7.shared.metrics import CallSample, Metrics
    from flux7.shared.settings import MetricsSettings
    from flux7.shared.store.db import Database

    db = Database(storage)
    metrics = Metrics(db, MetricsSettings(max_tools=cap))
    start.wait(30)
    for i in range(count):
        sample = CallSample(tool=f"w{worker}.t{i}", agent="claude", outcome="allow", transport="rest", seconds=0.01)
        with db.write() as conn:  # as the pipeline does: inside the trace's transaction
            metrics.record_call(sample, conn=conn)
    db.close()


def append_grouped(storage: str, trace_file: str, worker: int, count: int, start: Any) -> None:
    """`count` calls at once in one event loop, each writing an intent then its outcome through the group commit."""
    import asyncio

    from flux7.shared.settings import load_settings
    from flux7.shared.store.db import Database
    from flux7.shared.tracing import TraceEntry, Tracer

    settings = load_settings(None, env={}, storage_path=storage, trace_file=trace_file)
    db = Database(storage)
    tracer = Tracer(settings, db)

    async def one(i: int) -> None:
        entry = TraceEntry(agent_id=f"worker-{worker}", tool="t.call", params={"i": i}, policy="allow")
        row, _ = await tracer.begin_grouped(entry)
        await tracer.revise_grouped(row, {"status_code": 200})

    async def run() -> None:
        await asyncio.gather(*(one(i) for i in range(count)))
        await tracer.stop()

    start.wait(30)
    asyncio.run(run())
    assert tracer.store.group.rows == 2 * count
    db.close()
