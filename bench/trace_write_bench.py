"""The storage cost of a lone governed call's trace writes, without HTTP (issue 19): N begin + outcome pairs,
each written alone (its own transaction, as group commit writes a lone write), on a real SQLite file with the
trace file and key `flux7 serve` uses, and the call's metrics in the outcome's transaction. Reports µs per
pair (wall and process CPU). Then the same pairs through the group commit on an event loop, as the mesh writes
them, with a ticker on the loop: the longest time the loop could not run it (a checkpoint's fsync inside a
commit stalls it; issue 19) and the sum of the stalls over 5 ms. `--repo DIR` adds another checkout (e.g.
/work/main) and alternates the two in fresh child processes, so an A/B shares one machine state; the figures to
compare are the medians' ratio.

    python bench/trace_write_bench.py --repo /work/main --pairs 3000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


class _TimedConnection:
    """The store's write connection with the CPU time of each statement summed by its text (`--statements`)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.counts: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, params: Any = ()) -> Any:
        started = time.thread_time()
        try:
            return self.conn.execute(sql, params)
        finally:
            self.seconds[sql[:70]] += time.thread_time() - started
            self.counts[sql[:70]] += 1


def child(pairs: int, warm: int, statements: bool = False) -> None:
    from flux7.shared.metrics import CallSample, Metrics
    from flux7.shared.store.db import SqliteDatabase
    from flux7.shared.tracing.chain import JsonlAppender
    from flux7.shared.tracing.entry import TraceEntry
    from flux7.shared.tracing.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        db = SqliteDatabase(Path(tmp) / "flux7.db")
        timed = _TimedConnection(db._writer) if statements else None
        if timed is not None:
            db._writer = timed  # a bench's look inside: every statement of the writes goes through it
        store = TraceStore(db, key=b"k" * 32, appender=JsonlAppender(Path(tmp) / "traces.jsonl"))
        metrics = Metrics(db)
        sample = CallSample(
            tool="pets.list",
            agent="claude",
            outcome="allowed",
            transport="rest",
            seconds=0.004,
            upstream="pets",
            source="openapi",
            upstream_seconds=0.003,
        )

        def one(i: int) -> None:
            entry = TraceEntry(
                trace_id=f"{i:032x}",
                session_id="s-1",
                agent_id="claude",
                tool="pets.list",
                params={"limit": 10, "kind": "cat"},
                policy="allow",
                policy_rule="agents may list pets",
                span_id=f"{i:016x}",
            )
            row_id, _ = store.begin(entry)
            store.revise(
                row_id,
                {"status_code": 200, "latency_ms": 4, "estimated_output_tokens": 120},
                lambda conn: metrics.record_call(sample, conn=conn),
            )

        for i in range(warm):
            one(i)
        if timed is not None:
            timed.seconds.clear()
            timed.counts.clear()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(warm, warm + pairs):
            one(i)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if timed is not None:
            print(f"CPU per begin + outcome pair: {cpu / pairs * 1e6:.0f} µs, of which in SQLite statements:")
            for sql, spent in sorted(timed.seconds.items(), key=lambda kv: -kv[1]):
                print(f"{spent / pairs * 1e6:7.1f} µs  x{timed.counts[sql] / pairs:.1f}  {sql}")
            print(f"{sum(timed.seconds.values()) / pairs * 1e6:7.1f} µs  in all")
            db.close()
            return

        async def on_the_loop() -> list[float]:
            """The pairs again through the group commit, one call at a time; the loop's stalls, in seconds."""
            stalls: list[float] = []
            done = asyncio.Event()

            async def ticker() -> None:
                while not done.is_set():
                    asked = time.perf_counter()
                    await asyncio.sleep(0.001)
                    stalls.append(max(0.0, time.perf_counter() - asked - 0.001))

            ticking = asyncio.create_task(ticker())
            for i in range(warm + pairs, warm + 2 * pairs):
                entry = TraceEntry(trace_id=f"{i:032x}", agent_id="claude", tool="pets.list", policy="allow")
                row_id, stored = await store.begin_grouped(entry)
                await asyncio.sleep(0)  # the upstream call: the loop runs what is ready (a lone write never yields)
                await store.revise_grouped(
                    row_id,
                    {"status_code": 200, "latency_ms": 4},
                    lambda conn: metrics.record_call(sample, conn=conn),
                    stored,
                )
                await asyncio.sleep(0)  # the answer sent
            done.set()
            await ticking
            return stalls

        stalls = asyncio.run(on_the_loop())
        db.close()
    print(
        json.dumps(
            {
                "wall_us": wall / pairs * 1e6,
                "cpu_us": cpu / pairs * 1e6,
                "loop_max_stall_ms": max(stalls) * 1e3,
                "loop_stalls_over_5ms_ms": sum(x for x in stalls if x > 0.005) * 1e3,
            }
        )
    )


def run(repo: Path, pairs: int, warm: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", "--pairs", str(pairs), "--warm", str(warm)],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="another checkout to compare with this one (alternated)")
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--statements", action="store_true", help="this checkout only, in this process: CPU per SQLite statement"
    )
    args = parser.parse_args()
    if args.child or args.statements:
        child(args.pairs, args.warm, statements=args.statements)
        return
    repos = {"this": HERE} | ({"other": Path(args.repo).resolve()} if args.repo else {})
    seen: dict[str, list[dict[str, float]]] = {k: [] for k in repos}
    for r in range(args.rounds):
        order = list(repos.items()) if r % 2 == 0 else list(reversed(repos.items()))
        for name, repo in order:
            seen[name].append(run(repo, args.pairs, args.warm))
    load = os.getloadavg()
    med: dict[str, dict[str, float]] = {}
    for name, runs in seen.items():
        med[name] = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
        each = ", ".join(f"{x['wall_us']:.0f}/{x['cpu_us']:.0f}" for x in runs)
        print(
            f"{name:6} {repos[name]}: wall {med[name]['wall_us']:.1f} µs/pair, cpu {med[name]['cpu_us']:.1f} µs/pair"
            f"  (runs wall/cpu: {each}); on the loop: longest stall {med[name]['loop_max_stall_ms']:.1f} ms,"
            f" stalls over 5 ms {med[name]['loop_stalls_over_5ms_ms']:.0f} ms in all"
        )
    if "other" in med:
        print(
            f"this/other: wall {med['this']['wall_us'] / med['other']['wall_us']:.3f},"
            f" cpu {med['this']['cpu_us'] / med['other']['cpu_us']:.3f}"
        )
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    sys.path.insert(0, str(HERE))
    from bench._common import save

    repo_paths = {name: str(path) for name, path in repos.items()}
    save("trace_write", {"pairs": args.pairs, "repos": repo_paths, "runs": seen, "medians": med, "load": load})


if __name__ == "__main__":
    main()
