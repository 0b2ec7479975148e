"""Litestream replication of flux7's SQLite file: how far behind the replica is, and how long a restore takes.

1. Lag under a steady write load: traces recorded through the trace store at a fixed rate while `litestream
   replicate` ships the file to a `file` replica, and a follower (`litestream restore -f`, polling every 50 ms)
   applies the replica to a second file. Lag = commit -> the row readable in the follower, so it includes the
   follower's own polling (<= 50 ms) and is an upper bound on commit -> replica.
2. Restore of a large deployment: N memories and N traces written through the store components (batched into
   transactions of 1,000 for speed), pushed with `litestream replicate -once -force-snapshot`, then restored into
   an empty directory the way `flux7 restore` does it: the database, then the workspace and the trace file.

python bench/replication_bench.py [--rate 50] [--seconds 20] [--memories 100000] [--traces 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import save, summary
from flux7.shared.cli.backup import (
    Litestream,
    ReplicaSource,
    RestoreOutcome,
    find_litestream,
    recreate_beside,
    restore_database,
)
from flux7.shared.memory.store import MemoryStore
from flux7.shared.memory.workspace import Entry
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database
from flux7.shared.tracing.entry import TraceEntry, format_timestamp
from flux7.shared.tracing.store import NewRow, TraceStore


def _trace(i: int) -> TraceEntry:
    return TraceEntry(
        trace_id=f"{i:032x}",
        agent_id=f"agent-{i % 7}",
        tool="list_pets",
        params={"limit": i % 50, "tag": "dogs"},
        policy="allow",
        status_code=200,
        latency_ms=3,
        timestamp=format_timestamp(time.time_ns()),
    )


def _yml(root: Path, db: Path, replica: Path, sync: str, monitor: str | None) -> Path:
    extra = f"    monitor-interval: {monitor}\n" if monitor else ""
    path = root / "litestream.yml"
    path.write_text(
        f"dbs:\n  - path: {db}\n{extra}    replica:\n      url: {replica.as_uri()}\n      sync-interval: {sync}\n"
    )
    return path


def lag(rate: float, seconds: float, sync: str, monitor: str | None) -> dict[str, Any]:
    ls = Litestream(find_litestream())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db_path, replica, follower = root / "flux7.db", root / "replica", root / "follower.db"
        db = Database(db_path)
        store = TraceStore(db)
        store.record(_trace(0))
        config = _yml(root, db_path, replica, sync, monitor)
        replicate = subprocess.Popen(
            [ls.binary, "replicate", "-config", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        follow: subprocess.Popen[bytes] | None = None
        try:
            source = ReplicaSource(url=replica.as_uri())
            deadline = time.monotonic() + 30
            while ls.position(source) == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError("the replica never received its first snapshot")
                time.sleep(0.05)
            follow = subprocess.Popen(
                [ls.binary, "restore", "-f", "-follow-interval", "50ms", "-o", str(follower), replica.as_uri()],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            committed: dict[str, float] = {}
            seen: dict[str, float] = {}
            done = threading.Event()

            def writer() -> None:
                i, start = 1, time.perf_counter()
                while time.perf_counter() - start < seconds:
                    entry = store.record(_trace(i))
                    committed[entry.trace_id] = time.perf_counter()
                    i += 1
                    time.sleep(max(0.0, start + i / rate - time.perf_counter()))
                done.set()

            thread = threading.Thread(target=writer)
            thread.start()
            last = 0
            stop_at = None
            while True:
                if done.is_set() and stop_at is None:
                    stop_at = time.monotonic() + 30
                if stop_at is not None and (all(t in seen for t in committed) or time.monotonic() > stop_at):
                    break
                with contextlib.suppress(sqlite3.Error):
                    conn = sqlite3.connect(f"{follower.as_uri()}?mode=ro", uri=True)
                    try:
                        rows = conn.execute("SELECT id, trace_id FROM traces WHERE id > ? ORDER BY id", (last,))
                        now = time.perf_counter()
                        for row_id, trace_id in rows.fetchall():
                            seen.setdefault(trace_id, now)
                            last = row_id
                    finally:
                        conn.close()
                time.sleep(0.005)
            thread.join()
        finally:
            for proc in (follow, replicate):
                if proc is not None:
                    proc.terminate()
                    proc.wait(30)
            db.close()
    lags = [(seen[t] - committed[t]) * 1000 for t in committed if t in seen]
    return {
        "sync_interval": sync,
        "monitor_interval": monitor or "1s (default)",
        "rate_per_s": rate,
        "writes": len(committed),
        "missing": len(committed) - len(lags),
        "lag_ms": summary(lags),
        "max_ms": max(lags) if lags else float("nan"),
    }


def _fill(db: Database, root: Path, memories: int, traces: int) -> None:
    """The store's own steps (seal, append, journal, index; chain, row, stats), 1,000 to a transaction."""
    store = MemoryStore(db, root / "memory", max_entries=memories + 1)
    store.open()
    now = int(time.time())
    for base in range(0, memories, 1000):
        with db.write() as conn:
            for i in range(base, min(memories, base + 1000)):
                entry = Entry(
                    op="store",
                    entity=f"fact.{i}",
                    agent=f"agent-{i % 7}",
                    tags=["bench", f"t{i % 10}"],
                    ttl=0,
                    created=now,
                    updated=now,
                    body=f"memory {i}: the deployment restores from its replica without loss",
                )
                store.index.apply_store(conn, store._append(conn, entry, store._head(conn)))
    traces_store = TraceStore(db)
    for base in range(0, traces, 1000):
        with db.write() as conn:
            traces_store.apply(conn, [NewRow(_trace(i), None) for i in range(base, min(traces, base + 1000))])


def restore_time(memories: int, traces: int) -> dict[str, Any]:
    ls = Litestream(find_litestream(), timeout=1800)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        original, replica = root / "original", root / "replica"
        db = Database(original / "flux7.db")
        started = time.perf_counter()
        _fill(db, original, memories, traces)
        filled = time.perf_counter() - started
        db.close()
        size = (original / "flux7.db").stat().st_size
        started = time.perf_counter()
        ls.call(["replicate", "-once", "-force-snapshot", str(original / "flux7.db"), replica.as_uri()], timeout=1800)
        pushed = time.perf_counter() - started
        replica_bytes = sum(p.stat().st_size for p in replica.rglob("*") if p.is_file())

        config = root / "restored.yaml"
        config.write_text(
            "storage_path: restored/flux7.db\ntrace_file: restored/traces.jsonl\nmemory: {hybrid: false}\n"
        )
        settings = load_settings(config, env={})
        target = settings.resolve_path(settings.storage_path)
        started = time.perf_counter()
        outcome = restore_database(ls, ReplicaSource(url=replica.as_uri()), target)
        restored_db = time.perf_counter() - started
        started = time.perf_counter()
        recreate_beside(settings, target, outcome)
        recreated = time.perf_counter() - started
        check = sqlite3.connect(target)
        counts = {
            "memory_journal": check.execute("SELECT count(*) FROM memory_journal").fetchone()[0],
            "trace_lines": check.execute("SELECT count(*) FROM trace_lines").fetchone()[0],
        }
        check.close()
        workspace = root / "restored" / "memory" / "workspace"
        original_ws = original / "memory" / "workspace"
        same_workspace = all(
            (workspace / p.relative_to(original_ws)).read_bytes() == p.read_bytes() for p in original_ws.rglob("*.md")
        )
    assert isinstance(outcome, RestoreOutcome)
    return {
        "memories": memories,
        "traces": traces,
        "fill_s": round(filled, 2),
        "db_mb": round(size / 1e6, 1),
        "replica_mb": round(replica_bytes / 1e6, 1),
        "push_snapshot_s": round(pushed, 2),
        "restore_db_s": round(restored_db, 2),
        "recreate_workspace_and_trace_file_s": round(recreated, 2),
        "restore_total_s": round(restored_db + recreated, 2),
        "restored_rows": counts,
        "trace_lines_exported": outcome.trace_lines,
        "workspace_identical": same_workspace,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=50.0, help="writes per second during the lag measurement")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each lag measurement")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--traces", type=int, default=100_000)
    args = parser.parse_args()
    results: dict[str, Any] = {"litestream": Litestream(find_litestream()).version(), "lag": [], "restore": None}
    for sync, monitor in (("1s", None), ("100ms", "100ms")):
        r = lag(args.rate, args.seconds, sync, monitor)
        results["lag"].append(r)
        s = r["lag_ms"]
        print(
            f"lag (sync {sync}, monitor {r['monitor_interval']}, {args.rate:g} writes/s, {r['writes']} writes): "
            f"p50 {s['p50']:.0f} ms  p95 {s['p95']:.0f} ms  p99 {s['p99']:.0f} ms  max {r['max_ms']:.0f} ms"
            f"  missing {r['missing']}"
        )
    r = restore_time(args.memories, args.traces)
    results["restore"] = r
    print(
        f"restore of {r['memories']} memories + {r['traces']} traces ({r['db_mb']} MB db, {r['replica_mb']} MB "
        f"replica): database {r['restore_db_s']} s + workspace and trace file "
        f"{r['recreate_workspace_and_trace_file_s']} s = {r['restore_total_s']} s  "
        f"(snapshot push {r['push_snapshot_s']} s, workspace identical: {r['workspace_identical']})"
    )
    print(f"saved {save('replication', results)}")


if __name__ == "__main__":
    main()
