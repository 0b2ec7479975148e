"""Governed calls/s with 1, 2 and 3 `flux7 serve` instances on one PostgreSQL, against one instance on SQLite
(issue 18): a throwaway PostgreSQL cluster (tests/support/postgres.py), the raw echo backend (granian RSGI), and
`POST /tool/echo` (one allow rule, traces on, memory off, access log off, 1 granian worker per instance; each
instance in a folder of its own; SQLite with its JSONL trace file, PostgreSQL without one, as docs/deploy.md says).

The load is `wrk` at c=32 in all, split over the instances under load: one wrk per instance with c=32/N, run at
once, calls/s summed. Each round measures every point (SQLite; PostgreSQL with 1, 2, 3 instances) in an order
that alternates between rounds; each figure is the median of the rounds. Over every load segment:

- the CPU of the flux7 processes, of the PostgreSQL server (postmaster and its backends), of the echo backend
  (from /proc) and of wrk (this process's waited children), and the whole machine's busy cores (/proc/stat);
- PostgreSQL's own view: write transactions per governed call (transaction ids assigned), and pg_stat_activity
  sampled every 20 ms: how many of the instances' connections are running, waiting on a lock (advisory: the
  store-wide write lock; transactionid/tuple: the trace chain's head row), idle in a transaction (the instance's
  Python between two statements of a transaction, its locks held), or idle.

Run: python bench/postgres_instances_bench.py [--quick] [--seconds 8] [--rounds 3]
Needs wrk and the PostgreSQL server binaries (initdb, pg_ctl). Prints a markdown table and saves
bench/results/postgres_instances.json and .md (postgres_instances_quick.* with --quick)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench._common import RESULTS, free_port, save, wait_http  # noqa: E402
from bench.governed_call_bench import AGENT, GOVERNED_BODY, GRANIAN, POLICY, SERVE, SPEC, tree_cpu, wrk_script  # noqa: E402
from bench.rest_overhead_bench import ENV, start, stop, wrk  # noqa: E402
from tests.support.postgres import Cluster, find_bin_dir, with_database  # noqa: E402

TOTAL_CONNS = 32
INSTANCES = (1, 2, 3)
SAMPLE_EVERY = 0.02  # seconds between two pg_stat_activity samples


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


class Sampler:
    """pg_stat_activity of the bench database sampled on its own connection while a segment runs: per sample, the
    instances' connections by state (active / waiting on which lock / idle in transaction / idle)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        query = (
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
            " WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND query NOT LIKE 'LISTEN %'"
        )
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(SAMPLE_EVERY):
                rows = conn.execute(query).fetchall()
                self.samples += 1
                for state, kind, event in rows:
                    self.counts[classify(state, kind, event)] += 1


ADVISORY = "waiting: lock advisory"  # pg_advisory_xact_lock: the store-wide write lock (shared/store/postgresql.py)


def classify(state: str | None, kind: str | None, event: str | None) -> str:
    if state == "active":
        if kind == "Lock":
            return f"waiting: lock {event}"
        return "active" if kind is None else f"active ({kind}: {event})"
    if state == "idle in transaction":
        return "idle in transaction"
    return "idle"


def own_cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def next_xid(url: str) -> int:
    """The next transaction id to be assigned: its growth counts the write transactions committed or not (a
    read-only transaction gets none), exactly and at once, unlike pg_stat_database's lagging counters."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
    return int(row[0]) if row else 0


def postmaster_pid(cluster: Cluster) -> int:
    return int((cluster.directory / "data" / "postmaster.pid").read_text().split("\n", 1)[0])


class Deployment:
    """The echo backend, one SQLite instance and three instances on one PostgreSQL database, all on loopback."""

    def __init__(self, tmp: Path, bin_dir: Path) -> None:
        self.procs: list[Any] = []
        self.cluster: Cluster | None = None
        try:
            self._up(tmp, bin_dir)
        except BaseException:
            self.close()
            raise

    def _up(self, tmp: Path, bin_dir: Path) -> None:
        self.cluster = Cluster.start(bin_dir)
        with psycopg.connect(self.cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        self.db_url = with_database(self.cluster.url, "bench")
        backend_port = free_port()
        self.procs.append(
            start([*GRANIAN, "--port", str(backend_port), "--workers", "1", "--no-ws", "bench._echo_rsgi:app"], ENV)
        )
        wait_http(f"http://127.0.0.1:{backend_port}/echo")
        common = (
            "policy_dir: policies\nmemory: {enabled: false}\n"
            f"openapi:\n  - file: spec.json\n    backend_url: http://127.0.0.1:{backend_port}\n"
        )
        # Each deployment as docs/deploy.md sets it up: SQLite with its JSONL trace file beside the database;
        # PostgreSQL instances without one (the database holds the chain), each in a folder of its own as three
        # machines would be. They start one after another, so the first migrates alone.
        self.sqlite = self._mesh(tmp / "sqlite", "storage_path: flux7.db\ntrace_file: traces.jsonl\n" + common)
        self.pg = [self._mesh(tmp / f"pg{i}", f"database: {self.db_url}\n" + common) for i in range(max(INSTANCES))]

    def _mesh(self, home: Path, config: str) -> tuple[Any, str]:
        (home / "policies").mkdir(parents=True)
        (home / "spec.json").write_text(json.dumps(SPEC))
        (home / "policies" / "bench.yaml").write_text(POLICY)
        (home / "config.yaml").write_text(config)
        port = free_port()
        cmd = [*SERVE, "--config", str(home / "config.yaml"), "--port", str(port), "--workers", "1"]
        proc = start(cmd, ENV)
        self.procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", 60)
        # the load counts statuses only: make sure the answer is the echo
        r = httpx.post(f"{base}/tool/echo", json={"params": {"text": "hello"}}, headers=AGENT, timeout=30)
        if r.status_code != 200 or "hello" not in r.text:
            raise SystemExit(f"governed /tool/echo on {base}: {r.status_code} {r.text[:300]}")
        return proc, f"{base}/tool/echo"

    def close(self) -> None:
        for proc in reversed(self.procs):
            stop(proc)
        if self.cluster is not None:
            self.cluster.stop()


def segment(dep: Deployment, point: str, seconds: int, script: Path) -> dict[str, Any]:
    """One load segment: wrk against each instance under load at once, c=32 split between them."""
    meshes = [dep.sqlite] if point == "sqlite" else dep.pg[: int(point.removeprefix("pg"))]
    conns = [TOTAL_CONNS // len(meshes) + (i < TOTAL_CONNS % len(meshes)) for i in range(len(meshes))]
    on_pg = point != "sqlite"
    assert dep.cluster is not None
    postmaster = postmaster_pid(dep.cluster)
    sampler = Sampler(dep.db_url)
    xid_before = next_xid(dep.db_url) if on_pg else 0
    mesh_before = [tree_cpu(p.pid) for p, _ in meshes]
    pg_before = tree_cpu(postmaster)
    backend_before = tree_cpu(dep.procs[0].pid)
    # wrk runs as this process's child and is waited for within the segment: RUSAGE_CHILDREN grows by its CPU
    wrk_before, self_before = own_cpu(resource.RUSAGE_CHILDREN), own_cpu(resource.RUSAGE_SELF)
    busy_before, total_before = machine_busy()
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(meshes)) as pool:
        if on_pg:
            sampler.__enter__()
        try:
            loads = list(pool.map(lambda m: wrk(m[0][1], m[1], seconds, script), zip(meshes, conns, strict=True)))
        finally:
            if on_pg:
                sampler.__exit__()
    wall = time.monotonic() - t0
    busy, total = machine_busy()
    mesh_cpu = sum(tree_cpu(p.pid) - b for (p, _), b in zip(meshes, mesh_before, strict=True))
    pg_cpu = tree_cpu(postmaster) - pg_before
    backend_cpu = tree_cpu(dep.procs[0].pid) - backend_before
    wrk_cpu = own_cpu(resource.RUSAGE_CHILDREN) - wrk_before
    self_cpu = own_cpu(resource.RUSAGE_SELF) - self_before  # the sampler and the bench's own bookkeeping
    calls = max(sum(x["requests"] for x in loads), 1.0)
    rows = sum(sampler.counts.values()) or 1
    out: dict[str, Any] = {
        "rps": sum(x["rps"] for x in loads),
        "requests": calls,
        "p50_ms": statistics.median(x["p50_ms"] for x in loads),
        "p99_ms": max(x["p99_ms"] for x in loads),
        "non_2xx": sum(x["non_2xx"] for x in loads),
        "flux7_cpu_ms_per_call": mesh_cpu * 1000 / calls,
        "postgres_cpu_ms_per_call": pg_cpu * 1000 / calls,
        "flux7_cores_busy": mesh_cpu / wall,
        "postgres_cores_busy": pg_cpu / wall,
        "backend_cores_busy": backend_cpu / wall,
        "wrk_cores_busy": wrk_cpu / wall,
        "bench_cores_busy": self_cpu / wall,
        # /proc/stat's total grows by one tick per core per tick: busy / total × cores = cores busy
        "machine_cores_busy": (busy - busy_before) / max(total - total_before, 1e-9) * (os.cpu_count() or 1),
        "per_instance": loads,
    }
    # what else ran on the machine meanwhile (other work than this benchmark's processes)
    out["other_cores_busy"] = out["machine_cores_busy"] - sum(
        out[k]
        for k in ("flux7_cores_busy", "postgres_cores_busy", "backend_cores_busy", "wrk_cores_busy", "bench_cores_busy")
    )
    if on_pg:
        out["write_transactions_per_call"] = (next_xid(dep.db_url) - xid_before) / calls
        out["samples"] = sampler.samples
        # the mean number of the instances' connections in each state at any moment
        out["connections_by_state"] = {k: v / max(sampler.samples, 1) for k, v in sorted(sampler.counts.items())}
        out["share_by_state"] = {k: v / rows for k, v in sorted(sampler.counts.items())}
    return out


POINTS = ["sqlite", *(f"pg{n}" for n in INSTANCES)]
FIGURES = [
    "rps",
    "p50_ms",
    "p99_ms",
    "non_2xx",
    "flux7_cpu_ms_per_call",
    "postgres_cpu_ms_per_call",
    "flux7_cores_busy",
    "postgres_cores_busy",
    "backend_cores_busy",
    "wrk_cores_busy",
    "bench_cores_busy",
    "other_cores_busy",
    "machine_cores_busy",
    "write_transactions_per_call",
]


def medians(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for point in POINTS:
        runs = [r[point] for r in rounds]
        m: dict[str, Any] = {k: statistics.median(run[k] for run in runs) for k in FIGURES if k in runs[0]}
        m["rps_range"] = [min(run["rps"] for run in runs), max(run["rps"] for run in runs)]
        m["non_2xx"] = sum(run["non_2xx"] for run in runs)  # every error counts, not the median
        if "connections_by_state" in runs[0]:
            states = sorted({s for run in runs for s in run["connections_by_state"]})
            m["connections_by_state"] = {
                s: statistics.median(run["connections_by_state"].get(s, 0.0) for run in runs) for s in states
            }
        out[point] = m
    return out


LABELS = {
    "sqlite": "1 instance, SQLite",
    "pg1": "1 instance, PostgreSQL",
    "pg2": "2 instances, PostgreSQL",
    "pg3": "3 instances, PostgreSQL",
}


def markdown(points: dict[str, dict[str, Any]], n: int, seconds: int) -> str:
    rows = [
        f"| deployment (c=32 in all) | calls/s (median of {n}; range) | p50 / p99 | non-2xx | flux7 CPU / call |"
        " postgres CPU / call | cores busy: flux7 / postgres / echo backend / wrk / other work / machine |"
        " write transactions / call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for point, m in points.items():
        lo, hi = m["rps_range"]
        pg = f"{m['postgres_cpu_ms_per_call']:.3f} ms" if point != "sqlite" else "–"
        commits_text = f"{m['write_transactions_per_call']:.2f}" if "write_transactions_per_call" in m else "–"
        rows.append(
            f"| {LABELS[point]} | **{m['rps']:,.0f}** ({lo:,.0f} to {hi:,.0f}) |"
            f" {m['p50_ms']:.1f} / {m['p99_ms']:.1f} ms | {m['non_2xx']:.0f} | {m['flux7_cpu_ms_per_call']:.3f} ms |"
            f" {pg} | {m['flux7_cores_busy']:.2f} / {m['postgres_cores_busy']:.2f} / {m['backend_cores_busy']:.2f}"
            f" / {m['wrk_cores_busy']:.2f} / {m['other_cores_busy']:.2f} / {m['machine_cores_busy']:.2f}"
            f" | {commits_text} |"
        )
    # the store-wide write lock's column is shown even when no sample caught a connection waiting on it
    states = sorted({s for m in points.values() for s in m.get("connections_by_state", {})} | {ADVISORY})
    if any("connections_by_state" in m for m in points.values()):
        rows += [
            "",
            "Instances' PostgreSQL connections by state, mean count at any moment"
            f" (pg_stat_activity every {SAMPLE_EVERY * 1000:.0f} ms):",
            "",
            "| deployment | " + " | ".join(states) + " |",
            "|---|" + "---|" * len(states),
        ]
        for point, m in points.items():
            if "connections_by_state" in m:
                cells = " | ".join(f"{m['connections_by_state'].get(s, 0.0):.2f}" for s in states)
                rows.append(f"| {LABELS[point]} | {cells} |")
    load = os.getloadavg()
    rows += [
        "",
        f"{n} round(s) of {seconds} s segments, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" {os.cpu_count()} cores shared by the instances, PostgreSQL, the echo backend and wrk;"
        f" load average {load[0]:.1f} after.",
    ]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=8, help="length of each load segment")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every point; figures are their medians")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 2 s segments")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 2, 1
    name = "postgres_instances_quick" if args.quick else "postgres_instances"
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("the PostgreSQL server binaries are needed (initdb, pg_ctl): apt-get install postgresql")
    tmp = Path(tempfile.mkdtemp(prefix="flux7-pg-instances-bench-"))
    os.chmod(tmp, 0o755)
    script = wrk_script(tmp / "governed.lua", GOVERNED_BODY, AGENT)
    load_before = os.getloadavg()
    rounds: list[dict[str, dict[str, Any]]] = []
    dep = Deployment(tmp, bin_dir)
    try:
        for _, url in [dep.sqlite, *dep.pg]:  # warm every instance and its connection pool
            wrk(url, 8, 1, script)
        for r in range(args.rounds):
            out: dict[str, dict[str, Any]] = {}
            for point in POINTS if r % 2 == 0 else POINTS[::-1]:
                out[point] = segment(dep, point, args.seconds, script)
                p = out[point]
                print(
                    f"  round {r + 1} {LABELS[point]:<24} {p['rps']:7.0f}/s p50 {p['p50_ms']:5.1f} ms"
                    f" p99 {p['p99_ms']:6.1f} ms non-2xx {p['non_2xx']:.0f}"
                    f" | flux7 {p['flux7_cpu_ms_per_call']:.3f} ms/call, postgres"
                    f" {p['postgres_cpu_ms_per_call']:.3f} ms/call, machine {p['machine_cores_busy']:.2f} cores",
                    flush=True,
                )
            rounds.append(out)
    finally:
        dep.close()
    points = medians(rounds)
    table = markdown(points, args.rounds, args.seconds)
    print()
    print(table)
    path = save(
        name,
        {
            "seconds_per_segment": args.seconds,
            "rounds": args.rounds,
            "connections": TOTAL_CONNS,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "postgres": "throwaway cluster of tests/support/postgres.py: fsync off, synchronous_commit off",
            "points": points,
            "raw_rounds": rounds,
        },
    )
    (RESULTS / f"{name}.md").write_text(table)
    print(f"saved {path} and {RESULTS / (name + '.md')}")
    errors = sum(m["non_2xx"] for m in points.values())
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
