"""Where a governed call's CPU goes (issue 19): py-spy samples `flux7 serve` (every worker) while wrk drives
`POST /tool/echo` at c=32 against the raw echo backend, with the set-up of bench/governed_call_bench.py (one allow
rule, traces on, memory off, access log off). Two recordings of the same load, one after the other: a flame
graph (SVG, for the docs) and py-spy's raw collapsed stacks, from which the samples are attributed to categories
by the source file of their frames.

Attribution, two views. "Self": each sample goes to the category of the frame nearest its leaf that belongs to
one (JSON work inside the trace write counts as JSON; code of no category counts for its nearest categorised
caller). "Inclusive": the share of samples with a frame of the category anywhere on the stack (the categories
overlap, so these do not add up to 100%). C extensions (sqlite3, msgspec, _json) are seen through --native when
py-spy can unwind them, otherwise their time counts for the Python line that called them. Threads that run no
Python (granian's Rust I/O threads) are not sampled; the summary compares the sampled time with the process
tree's CPU time from /proc to say how much that is.

At c=1 (`--concurrency 1`, issue 19's added latency) the CPU per call is not the whole story: a lone call also
waits on hand-offs between threads (granian's I/O threads and the event loop) and on loop turns. `--wall`
samples wall-clock time instead (py-spy --idle, every thread whether it holds the GIL or not: where the call
waits), and `--syscalls N` counts the worker's system calls over N sequential calls on one kept-alive
connection (strace -c -f): a count per call that does not move with the machine's load, where the hand-offs
show as wake-ups (sendto on the loop's self-pipe, futex, epoll_wait per loop turn) and the trace writes as
their flock, fcntl and pwrite64.

Run as root (py-spy needs ptrace): python bench/profile_governed.py [--seconds 15] [--label before]
[--concurrency 1] [--wall] [--syscalls 1000]
Needs wrk (apt-get install wrk), py-spy (pip install py-spy, in the dev extras), strace for --syscalls."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, save  # noqa: E402
from bench.governed_call_bench import _TICK as TICK  # noqa: E402
from bench.governed_call_bench import (  # noqa: E402
    AGENT,
    GOVERNED_BODY,
    MESH_CWD,
    MESH_ENV,
    Stack,
    tree_cpu,
    wrk_script,
)

DOCS = ROOT / "docs" / "benchmarks"

# Categories by frame, first match wins; patterns are searched in the frame text "function (file:line)".
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("garbage collector", ("gc_collect", "(gc)")),  # triggered by allocations anywhere: object churn
    ("JSON", ("/json/", "msgspec", "_json", "orjson", "json_depth")),
    ("trace write (SQLite)", ("shared/tracing/", "sqlite3", "shared/store/db.py", "shared/gate/audit.py")),
    ("metrics", ("shared/metrics.py", "prometheus_client", "functions/metrics.py")),
    (
        "identity",
        (
            "shared/auth/identity.py",
            "shared/auth/tokens.py",
            "shared/cli/machine_tokens.py",
            "functions/auth.py",
            "/jwt/",
        ),
    ),
    (
        "policy",
        ("shared/policy", "shared/globs.py", "shared/governance/", "shared/gate/grants.py", "shared/gate/halts.py"),
    ),
    ("limits", ("shared/gate/limits.py",)),
    (
        "upstream client",
        ("shared/upstreams/", "shared/outbound.py", "/aiohttp/", "/httpx/", "/httpcore/", "/yarl/", "/multidict/"),
    ),
    ("logging", ("/logging/",)),
    ("flux7 edge and pipeline", ("flux7/functions/", "flux7/shared/")),  # the rest of flux7's own code
    ("HTTP framework (litestar, granian)", ("/litestar/", "/granian/", "/anyio/")),
    ("event loop (asyncio)", ("/asyncio/", "selectors.py")),
]
OTHER = "other"


def categorise(stack: list[str]) -> tuple[str, set[str]]:
    """(the nearest category from the leaf, every category on the stack) of one sample's frames, root first."""
    found: list[str] = []
    for frame in reversed(stack):
        if frame.startswith("process "):  # --subprocesses puts the process's command line at the root
            continue
        for name, patterns in CATEGORIES:
            if any(p in frame for p in patterns):
                found.append(name)
                break
    return (found[0] if found else OTHER), set(found)


def attribute(raw: str) -> dict[str, Any]:
    """Sample counts per category from py-spy's raw output (one `frame;frame;... count` line per distinct stack)."""
    self_count: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        nearest, anywhere = categorise(stack_text.split(";"))
        self_count[nearest] += count
        leaves[f"{nearest}: {_leaf(stack_text.split(';'))}"] += count
        for name in anywhere:
            inclusive[name] += count
        total += count
    names = [name for name, _ in CATEGORIES] + [OTHER]
    return {
        "samples": total,
        "self": {n: self_count[n] / total if total else 0.0 for n in names},
        "inclusive": {n: inclusive[n] / total if total else 0.0 for n in names if n != OTHER},
        "top_leaves": {k: v / total for k, v in leaves.most_common(25)},
    }


def _leaf(stack: list[str]) -> str:
    """The innermost named frame, its file shortened to the last two path parts (bare native addresses skipped)."""
    named = [f for f in stack if not f.startswith("process ")]
    if not named:
        return "(no frame)"
    frame = next((f for f in reversed(named) if not f.startswith("0x")), named[-1])
    return re.sub(r"\(\S*?([^/\s]+/[^/\s]+)\)$", r"(\1)", frame)


def record(pid: int, seconds: int, rate: int, fmt: str, out: Path, native: bool, wall: bool = False) -> None:
    cmd = ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--rate", str(rate), "--duration", str(seconds)]
    # CPU: the samples of the thread holding the GIL; wall-clock: every thread's, idle ones included
    cmd += ["--idle"] if wall else ["--gil"]
    cmd += ["--format", fmt, "--output", str(out)]
    if fmt == "raw":
        cmd.append("--full-filenames")
    if native:
        cmd.append("--native")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"py-spy failed ({' '.join(cmd)}): {done.stderr[-800:]}")


def threads_cpu(root: int) -> Counter[str]:
    """CPU seconds so far of every thread under `root` (processes included), summed by thread name; the main
    thread of each process is named "main"."""
    out: Counter[str] = Counter()
    pids = [root]
    seen: set[int] = set()
    while pids:
        pid = pids.pop()
        seen.add(pid)
        task_dir = Path(f"/proc/{pid}/task")
        try:
            tids = [int(t) for t in os.listdir(task_dir)]
        except OSError:
            continue
        for tid in tids:
            try:
                name = (task_dir / str(tid) / "comm").read_text().strip()
                raw = (task_dir / str(tid) / "stat").read_text()
                children = (task_dir / str(tid) / "children").read_text().split()
            except OSError:
                continue
            rest = raw[raw.rindex(")") + 2 :].split()
            thread = "main" if tid == pid else re.sub(r"[-_ ]?\d+$", "", name)
            out[thread] += (int(rest[11]) + int(rest[12])) / TICK  # type: ignore[assignment]  # float seconds
            pids.extend(int(c) for c in children if int(c) not in seen)
    return out


def syscalls(worker: int, url: str, calls: int) -> dict[str, float]:
    """System calls per call of one worker process (every thread), over `calls` sequential governed calls on one
    kept-alive connection (strace -c -f; warm-up calls first, outside the count)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=30)
    headers = {**AGENT, "Content-Type": "application/json"}

    def call(n: int) -> None:
        for _ in range(n):
            conn.request("POST", parts.path, GOVERNED_BODY, headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"governed call answered {answer.status}")

    call(100)
    out = Path(tempfile.mkdtemp(prefix="flux7-strace-")) / "counts.txt"
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(worker), "-o", str(out)], stderr=subprocess.PIPE)
    # strace reports "attached" on stderr once it traces every thread
    assert tracer.stderr is not None
    tracer.stderr.readline()
    call(calls)
    tracer.send_signal(2)
    tracer.wait(30)
    conn.close()
    counts: dict[str, float] = {}
    for line in out.read_text().splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[3].isdigit() and not line.startswith(("-", "%")) and cells[-1] != "total":
            counts[cells[-1]] = int(cells[3]) / calls
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def compact(text: str) -> str:
    """Raw stacks without the command line on every process frame and with the install prefixes cut short (the
    categories' patterns still match): small enough, gzipped, to keep beside the results."""
    text = re.sub(r'process (\d+):"[^"]*"', r"process \1", text)
    for prefix, short in (
        (sysconfig.get_paths()["purelib"], "site-packages"),
        (sysconfig.get_paths()["stdlib"], "stdlib"),
        (str(ROOT), "."),
    ):
        text = text.replace(prefix + "/", short + "/")
    return text


def markdown(summary: dict[str, Any], cpu_ms_per_call: float) -> str:
    rows = ["| category | self | ≈ CPU per call | inclusive |", "|---|---|---|---|"]
    for name, share in sorted(summary["self"].items(), key=lambda kv: -kv[1]):
        inclusive = summary["inclusive"].get(name)
        anywhere = "" if inclusive is None else f"{inclusive:.0%}"
        rows.append(f"| {name} | {share:.0%} | {share * cpu_ms_per_call:.2f} ms | {anywhere} |")
    return "\n".join(rows) + "\n"


def compare(a: str, b: str) -> str:
    """Two saved profiles' categories side by side (e.g. before and after), as a markdown table."""
    runs = [json.loads((RESULTS / f"profile_governed_{label}.json").read_text()) for label in (a, b)]
    rows = [
        f"| category | {a} self | {a} ≈ CPU per call | {b} self | {b} ≈ CPU per call |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(runs[0]["self"], key=lambda n: -runs[0]["self"][n]):
        cells = [
            f"{r['self'].get(name, 0.0):.0%} | {r['self'].get(name, 0.0) * r['cpu_ms_per_call']:.2f} ms" for r in runs
        ]
        rows.append(f"| {name} | {cells[0]} | {cells[1]} |")
    totals = [f"100% | {r['cpu_ms_per_call']:.2f} ms" for r in runs]
    rows.append(f"| **mesh CPU per call under the profiler** | {totals[0]} | {totals[1]} |")
    return "\n".join(rows) + "\n"


def report(result: dict[str, Any], raw: Path) -> None:
    """Attribute the raw stacks, print the tables and save them (JSON beside the raw stacks, markdown table)."""
    text = gzip.decompress(raw.read_bytes()).decode()
    wall = str(result.get("samples_of", "")).startswith("wall")
    if wall:  # the event loop's thread only: where a call's time goes while the loop serves it, or waits
        text = "\n".join(line for line in text.splitlines() if "run_forever" in line)
    summary = attribute(text)
    calls = result["wrk_rps"] * result["recording_wall_seconds"]
    cpu_ms_per_call = result["tree_cpu_seconds"] * 1000 / calls if calls else float("nan")
    if wall:  # each category's share of the loop thread's wall-clock time, per call
        cpu_ms_per_call = result["recording_wall_seconds"] * 1000 / calls if calls else float("nan")
    sampled_seconds = summary["samples"] / result["rate"]
    result |= {
        "cpu_ms_per_call": cpu_ms_per_call,
        "sampled_python_seconds": sampled_seconds,
        "sampled_share_of_cpu": sampled_seconds / result["tree_cpu_seconds"],
        **summary,
    }
    table = markdown(summary, cpu_ms_per_call)
    print(table)
    print(
        f"{summary['samples']} samples ({sampled_seconds:.1f} s {'of the loop thread' if wall else 'holding the GIL'})"
        " against"
        f" {result['tree_cpu_seconds']:.1f} s of mesh CPU in {result['recording_wall_seconds']:.1f} s"
        f" ({result['sampled_share_of_cpu']:.0%}); wrk {result['wrk_rps']:.0f} calls/s under the profiler,"
        f" ≈ {cpu_ms_per_call:.2f} ms of {'wall-clock time' if wall else 'mesh CPU'} per call"
    )
    print("innermost frames:")
    for leaf, share in summary["top_leaves"].items():
        print(f"  {share:5.1%} {leaf}")
    threads = result["cpu_seconds_by_thread"]
    print("mesh CPU by thread name:", ", ".join(f"{k} {v:.2f} s" for k, v in threads.items()))
    path = save(f"profile_governed_{result['label']}", result)
    (RESULTS / f"profile_governed_{result['label']}.md").write_text(table)
    print(f"flame graph {ROOT / result['flame_graph']}; summary {path}; raw stacks {raw}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=15, help="length of each recording")
    parser.add_argument("--rate", type=int, default=100, help="samples per second per process")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repo", help="profile the mesh of this checkout (its flux7 package) instead of this one's")
    parser.add_argument("--concurrency", type=int, default=32, help="wrk's connections (1: the lone call)")
    parser.add_argument("--wall", action="store_true", help="wall-clock samples (py-spy --idle), not CPU (--gil)")
    parser.add_argument(
        "--syscalls", type=int, metavar="N", help="no profile: the worker's system calls per call over N calls"
    )
    parser.add_argument("--label", default="before", help="names the outputs: governed-profile-<label>.svg")
    parser.add_argument("--no-native", action="store_true", help="do not unwind C extensions")
    parser.add_argument(
        "--analyse", action="store_true", help="no recording: attribute the saved raw stacks of --label again"
    )
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), help="no recording: two saved labels side by side, as markdown"
    )
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return 0
    if args.repo:
        MESH_ENV["PYTHONPATH"] = str(Path(args.repo).resolve())
        MESH_CWD.append(str(Path(args.repo).resolve()))
    svg = DOCS / f"governed-profile-{args.label}.svg"
    raw = RESULTS / f"profile_governed_{args.label}.txt.gz"
    if args.analyse:
        saved = json.loads((RESULTS / f"profile_governed_{args.label}.json").read_text())
        keep: tuple[str, ...] = ("label", "seconds", "rate", "workers", "native", "wrk_rps", "tree_cpu_seconds")
        keep += tuple(k for k in ("concurrency", "samples_of") if k in saved)  # not in older recordings
        keep += ("recording_wall_seconds", "cpu_seconds_by_thread", "flame_graph", "raw")
        report({k: saved[k] for k in keep}, raw)
        return 0
    needed = [("strace", "apt-get install strace")] if args.syscalls else [("wrk", "apt-get install wrk")]
    for tool, how in [*needed, ("py-spy", "pip install py-spy")]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed: {how}")
    tmp = Path(tempfile.mkdtemp(prefix="flux7-profile-"))
    if args.syscalls:
        return count_syscalls(tmp, args)
    script = wrk_script(tmp / "governed.lua", GOVERNED_BODY, AGENT)
    DOCS.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stack = Stack(tmp, [args.workers], mcp=False)
    load: subprocess.Popen[str] | None = None
    try:
        mesh = stack.meshes[args.workers][0].pid
        url = stack.url(args.workers, "/tool/echo")
        load_seconds = 2 * args.seconds + 6
        c = args.concurrency
        load = subprocess.Popen(
            ["wrk", "-t", str(min(2, c)), "-c", str(c), "-d", f"{load_seconds}s", "-s", str(script), url],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1)  # the load reaches its steady state
        record(mesh, args.seconds, args.rate, "flamegraph", svg, not args.no_native, args.wall)
        cpu_before, threads_before, t0 = tree_cpu(mesh), threads_cpu(mesh), time.monotonic()
        record(mesh, args.seconds, args.rate, "raw", tmp / "raw.txt", not args.no_native, args.wall)
        cpu_seconds, wall = tree_cpu(mesh) - cpu_before, time.monotonic() - t0
        by_thread = threads_cpu(mesh)
        by_thread.subtract(threads_before)
        out, _ = load.communicate(timeout=load_seconds + 30)
    finally:
        if load is not None and load.poll() is None:
            load.kill()
        stack.close()
    raw.write_bytes(gzip.compress(compact((tmp / "raw.txt").read_text()).encode()))
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    result = {
        "label": args.label,
        "seconds": args.seconds,
        "rate": args.rate,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "samples_of": "wall-clock (every thread)" if args.wall else "CPU (the thread holding the GIL)",
        "native": not args.no_native,
        "wrk_rps": float(rps.group(1)) if rps else float("nan"),
        "tree_cpu_seconds": cpu_seconds,
        "recording_wall_seconds": wall,
        "cpu_seconds_by_thread": {k: round(v, 3) for k, v in by_thread.most_common() if v > 0},
        "flame_graph": str(svg.relative_to(ROOT)),
        "raw": str(raw.relative_to(ROOT)),
    }
    report(result, raw)
    return 0


def count_syscalls(tmp: Path, args: argparse.Namespace) -> int:
    """`--syscalls N`: one worker, N sequential calls, the worker's system calls per call."""
    stack = Stack(tmp, [1], mcp=False)
    try:
        mesh = stack.meshes[1][0].pid
        worker = next(int(c) for c in Path(f"/proc/{mesh}/task/{mesh}/children").read_text().split())
        counts = syscalls(worker, stack.url(1, "/tool/echo"), args.syscalls)
    finally:
        stack.close()
    rows = ["| system call | per governed call |", "|---|---|"]
    rows += [f"| {name} | {n:.1f} |" for name, n in counts.items() if n >= 0.05]
    rows.append(f"| **all** | {sum(counts.values()):.1f} |")
    table = "\n".join(rows) + "\n"
    print(table)
    label = f"syscalls_{args.label}"
    path = save(f"profile_governed_{label}", {"calls": args.syscalls, "per_call": counts})
    (RESULTS / f"profile_governed_{label}.md").write_text(table)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
