"""The governed call against the upstream called directly, in one run (issue 19): a raw echo backend (granian RSGI)
called directly and through the mesh's `POST /tool/echo` (one allow rule, traces on, memory off, `flux7 serve`
with the access log off), with two load generators, `wrk` and an async Python client (aiohttp), at c=1 and c=32,
the mesh with 1 and 2 granian workers; and MCP `tools/call` through `/mcp` against the SDK echo server called
directly, at c=32, with the official SDK client (and wrk beside it). Beside each REST point runs the floor under
any governed call: a bare forwarder (bench/_bare_proxy.py, an RSGI app on granian as `flux7 serve` runs the mesh,
with the same worker count, that forwards the body with the mesh's own HTTP client and does nothing else), so the
table shows how far serving a forwarded call from Python on this server already is from the direct backend, and
what governance adds to it.

Every point runs direct and governed back to back, and the whole sequence is repeated in rounds whose order
alternates (direct first, then governed first), so a burst of load from elsewhere on the machine hits both sides;
each figure is the median of the rounds' figures. Mesh server CPU per governed call is the CPU time of the mesh's
process tree (user + system, every process and thread, read from /proc) over a load segment, divided by the calls
it answered in that segment.

Run: python bench/governed_call_bench.py [--quick] [--seconds 5] [--rounds 3]
Needs wrk (apt-get install wrk) and the dev extras. Prints the issue's five figures against their targets as a
markdown table (ready to paste into docs/benchmarks.md) and saves bench/results/governed_call.json and .md."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import httpx  # noqa: E402

from bench._common import RESULTS, free_port, pct, save, wait_http  # noqa: E402
from bench.mcp_bench import ECHO, check, lua  # noqa: E402
from bench.rest_overhead_bench import ENV, start, stop, wrk  # noqa: E402

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "bench", "version": "1"},
    "paths": {
        "/echo": {
            "post": {
                "operationId": "echo",
                "summary": "echo the body",
                "requestBody": {
                    "content": {
                        "application/json": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
                    }
                },
            }
        }
    },
}
# One allow rule: the REST tool `echo` and the MCP server's tools `echo.*`.
POLICY = "name: bench\nagent: '*'\nrules:\n  - tools: ['echo', 'echo.*']\n    action: allow\n"
AGENT = {"Authorization": "Bearer agent:bench"}
GRANIAN = [sys.executable, "-m", "granian", "--interface", "rsgi", "--host", "127.0.0.1"]
BARE = [sys.executable, "-m", "granian", "--interface", "rsgi", "--loop", "asyncio", "--host", "127.0.0.1", "--no-ws"]
SERVE = [sys.executable, "-m", "flux7.functions.entry", "serve", "--no-access-log"]
# The mesh's environment: `--repo DIR` runs another checkout's flux7 (a before/after pair on one quiet machine).
MESH_ENV = dict(ENV)
MESH_CWD: list[str] = []  # `python -m` puts the working folder first on sys.path: the checkout's own
DIRECT_BODY = b'{"text": "hello"}'
GOVERNED_BODY = b'{"params": {"text": "hello"}}'

# The five figures: (key, label, target, higher is better).
TARGETS: list[tuple[str, str, float, bool]] = [
    ("added_p50_ms_c1_w1", "added p50 latency at c=1, 1 worker (Python client)", 1.0, False),
    ("ratio_c32_w2_py", "calls/s at c=32, 2 workers, vs direct, Python client", 0.75, True),
    ("wrk_rps_c32_w2", "calls/s at c=32, 2 workers, with `wrk`", 4000.0, True),
    ("cpu_ms_per_call_c32_w2", "mesh server CPU per governed call at c=32, 2 workers (Python client)", 0.5, False),
    ("mcp_ratio_c32", "MCP `tools/call` through `/mcp` vs direct, c=32 (official SDK client)", 0.90, True),
]


# --- CPU time of a process tree, from /proc -------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of one process, all its threads included; None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by `root` and every process under it."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


# --- load generators -----------------------------------------------------------------------------------------


def _latency_summary(latencies: list[float], elapsed: float, errors: int) -> dict[str, float]:
    ms = [x * 1000 for x in latencies]
    return {
        "rps": len(ms) / elapsed,
        "requests": float(len(ms)),
        "p50_ms": pct(ms, 50),
        "p90_ms": pct(ms, 90),
        "p99_ms": pct(ms, 99),
        "non_2xx": float(errors),
    }


async def _drive(
    call: Callable[[], Awaitable[bool]], conns: int, seconds: int, probe: Probe, warm_s: float
) -> dict[str, float]:
    """`conns` clients, each making its next `call` (True when it succeeded) when the last is answered: `warm_s`
    of warm-up (connections opened), then `seconds` measured with the probe running."""
    latencies: list[float] = []
    errors = 0

    async def client(deadline: float) -> None:
        nonlocal errors
        while (t0 := time.perf_counter()) < deadline:
            if not await call():
                errors += 1
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*[client(time.perf_counter() + warm_s) for _ in range(conns)])
    latencies.clear()
    errors = 0
    probe.start()
    started = time.perf_counter()
    await asyncio.gather(*[client(started + seconds) for _ in range(conns)])
    elapsed = time.perf_counter() - started
    probe.stop()
    return _latency_summary(latencies, elapsed, errors)


async def _aiohttp_load(
    url: str, body: bytes, headers: dict[str, str], conns: int, seconds: int, probe: Probe
) -> dict[str, float]:
    """`conns` clients, each sending its next request when the last is answered, for `seconds`."""
    connector = aiohttp.TCPConnector(limit=conns)
    headers = {"Content-Type": "application/json", **headers}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post() -> bool:
            async with session.post(url, data=body, headers=headers) as r:
                await r.read()
                return r.status == 200

        return await _drive(post, conns, seconds, probe, 0.2)


def py_load(url: str, body: bytes, headers: dict[str, str], conns: int, seconds: int, probe: Probe) -> dict[str, float]:
    return asyncio.run(_aiohttp_load(url, body, headers, conns, seconds, probe))


async def _sdk_load(
    url: str, tool: str, headers: dict[str, str], conns: int, seconds: int, probe: Probe
) -> dict[str, float]:
    """`conns` concurrent `tools/call`s from one official MCP SDK client (its default, stateless mode)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    limits = httpx2.Limits(max_connections=conns, max_keepalive_connections=conns)
    http = httpx2.AsyncClient(headers=headers, timeout=30, limits=limits)
    async with http, Client(streamable_http_client(url, http_client=http)) as mcp_client:

        async def call() -> bool:
            result = await mcp_client.call_tool(tool, {"text": "hello"})
            return not result.is_error

        return await _drive(call, conns, seconds, probe, 0.3)


def sdk_load(url: str, tool: str, headers: dict[str, str], conns: int, seconds: int, probe: Probe) -> dict[str, float]:
    return asyncio.run(_sdk_load(url, tool, headers, conns, seconds, probe))


def wrk_script(path: Path, body: bytes, headers: dict[str, str]) -> Path:
    lines = ['wrk.method = "POST"', f"wrk.body = '{body.decode()}'", 'wrk.headers["Content-Type"] = "application/json"']
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the processes ---------------------------------------------------------------------------------------------


class Stack:
    """The echo backend, the SDK's MCP echo server, one `flux7 serve` per worker count and (`bare`) one bare
    forwarder per worker count, all on loopback."""

    def __init__(self, tmp: Path, workers: list[int], mcp: bool = True, bare: bool = False) -> None:
        self.procs: list[Any] = []
        try:
            self._up(tmp, workers, mcp, bare)
        except BaseException:  # nothing started is left running (they run in their own sessions)
            self.close()
            raise

    def _up(self, tmp: Path, workers: list[int], mcp: bool, bare: bool) -> None:
        self.backend_port = free_port()
        self.backend = self._start(
            [*GRANIAN, "--port", str(self.backend_port), "--workers", "1", "--no-ws", "bench._echo_rsgi:app"]
        )
        self.mcp_port = free_port()
        if mcp:
            self.mcp_upstream = self._start(
                [sys.executable, str(ECHO), "--transport", "streamable-http", "--port", str(self.mcp_port)]
            )
        self.direct_url = f"http://127.0.0.1:{self.backend_port}/echo"
        self.mcp_direct_url = f"http://127.0.0.1:{self.mcp_port}/mcp"
        wait_http(self.direct_url)
        if mcp:
            wait_http(f"http://127.0.0.1:{self.mcp_port}/", 30)
        self.meshes: dict[int, tuple[Any, int]] = {}
        for w in workers:
            home = tmp / f"mesh-w{w}"
            (home / "policies").mkdir(parents=True)
            (home / "spec.json").write_text(json.dumps(SPEC))
            (home / "policies" / "bench.yaml").write_text(POLICY)
            (home / "config.yaml").write_text(
                "storage_path: flux7.db\ntrace_file: traces.jsonl\npolicy_dir: policies\nmemory: {enabled: false}\n"
                f"openapi:\n  - file: spec.json\n    backend_url: http://127.0.0.1:{self.backend_port}\n"
                + (
                    f"mcp_servers:\n  - {{name: echo, transport: streamable-http, url: '{self.mcp_direct_url}'}}\n"
                    if mcp
                    else ""
                )
            )
            port = free_port()
            proc = self._start(
                [*SERVE, "--config", str(home / "config.yaml"), "--port", str(port), "--workers", str(w)],
                MESH_ENV,
            )
            self.meshes[w] = (proc, port)
        self.bare: dict[int, tuple[Any, int]] = {}
        for w in workers if bare else []:
            port = free_port()
            env = {**ENV, "FLUX7_BARE_BACKEND": f"http://127.0.0.1:{self.backend_port}"}
            proc = self._start([*BARE, "--port", str(port), "--workers", str(w), "bench._bare_proxy:app"], env)
            self.bare[w] = (proc, port)
            wait_http(f"http://127.0.0.1:{port}/")
        for w, (_, port) in self.meshes.items():
            base = f"http://127.0.0.1:{port}"
            wait_http(f"{base}/health", 60)
            deadline = time.monotonic() + 30
            while mcp and httpx.get(f"{base}/health").json().get("tools", 0) < 2:  # the MCP upstream connects later
                if time.monotonic() > deadline:
                    raise SystemExit(f"mesh with {w} workers: the MCP upstream never connected")
                time.sleep(0.1)
            self.check_rest(w)
            if mcp:
                check(f"{base}/mcp", "echo.echo")
        if mcp:
            check(self.mcp_direct_url, "echo")

    def _start(self, cmd: list[str], env: dict[str, str] | None = None) -> Any:
        if env is MESH_ENV and MESH_CWD:
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=MESH_CWD[0],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        else:
            proc = start(cmd, env=env or ENV)
        self.procs.append(proc)
        return proc

    def url(self, w: int, path: str) -> str:
        return f"http://127.0.0.1:{self.meshes[w][1]}{path}"

    def bare_url(self, w: int) -> str:
        return f"http://127.0.0.1:{self.bare[w][1]}/echo"

    def check_rest(self, w: int) -> None:
        """One governed call first: the load counts statuses only, so make sure the answer is the echo."""
        r = httpx.post(self.url(w, "/tool/echo"), json={"params": {"text": "hello"}}, headers=AGENT)
        if r.status_code != 200 or "hello" not in r.text:
            raise SystemExit(f"governed /tool/echo ({w} workers): {r.status_code} {r.text[:300]}")

    def close(self) -> None:
        for proc in reversed(self.procs):
            stop(proc)


class Probe:
    """CPU time of process trees (mesh, upstream) over the measured part of a load segment, warm-up excluded."""

    def __init__(self, *trees: int) -> None:
        self.trees = trees
        self.before: list[float] = []
        self.cpu: list[float] = []
        self.wall = 0.0

    def start(self) -> None:
        self.before, self.t0 = [tree_cpu(t) for t in self.trees], time.monotonic()

    def stop(self) -> None:
        self.wall = time.monotonic() - self.t0
        self.cpu = [tree_cpu(t) - b for t, b in zip(self.trees, self.before, strict=True)]


def measured(load: Callable[[Probe], dict[str, float]], *trees: int) -> dict[str, Any]:
    """Run one load segment; add the CPU ms per answered call, and the cores busy, of each process tree."""
    probe = Probe(*trees)
    out: dict[str, Any] = load(probe)
    calls = max(out["requests"], 1.0)
    out["cpu_ms_per_call"] = [cpu * 1000 / calls for cpu in probe.cpu]
    out["cores_busy"] = [cpu / probe.wall for cpu in probe.cpu]
    return out


def wrk_load(url: str, conns: int, seconds: int, script: Path, probe: Probe) -> dict[str, float]:
    probe.start()
    try:
        return wrk(url, conns, seconds, script)
    finally:
        probe.stop()


# --- the run ---------------------------------------------------------------------------------------------------


def run_round(stack: Stack, args: argparse.Namespace, r: int, scripts: dict[str, Path]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    backend = stack.backend.pid
    for w in args.workers:
        mesh, bare = stack.meshes[w][0].pid, stack.bare[w][0].pid
        governed_url = stack.url(w, "/tool/echo")
        for client in ("py", "wrk"):
            for c in args.concurrency:
                sides: dict[str, Callable[[Probe], dict[str, float]]]
                if client == "py":
                    sides = {
                        "direct": partial(py_load, stack.direct_url, DIRECT_BODY, {}, c, args.seconds),
                        "governed": partial(py_load, governed_url, GOVERNED_BODY, AGENT, c, args.seconds),
                        "bare": partial(py_load, stack.bare_url(w), DIRECT_BODY, {}, c, args.seconds),
                    }
                else:
                    sides = {
                        "direct": partial(wrk_load, stack.direct_url, c, args.seconds, scripts["direct"]),
                        "governed": partial(wrk_load, governed_url, c, args.seconds, scripts["governed"]),
                        "bare": partial(wrk_load, stack.bare_url(w), c, args.seconds, scripts["direct"]),
                    }
                point = {}
                # direct first in even rounds, governed first in odd; the bare forwarder between them
                for side in ("direct", "bare", "governed")[:: -1 if r % 2 else 1]:
                    point[side] = measured(sides[side], bare if side == "bare" else mesh, backend)
                out[f"w{w}_c{c}_{client}"] = point
                print(f"  round {r + 1} {describe(w, c, client, point)}", flush=True)
    w = args.mcp_workers
    mesh = stack.meshes[w][0].pid
    upstream = stack.mcp_upstream.pid
    mcp_sides: dict[str, dict[str, Callable[[Probe], dict[str, float]]]] = {
        "sdk": {
            "direct": partial(sdk_load, stack.mcp_direct_url, "echo", {}, 32, args.seconds),
            "governed": partial(sdk_load, stack.url(w, "/mcp"), "echo.echo", AGENT, 32, args.seconds),
        },
        "wrk": {
            "direct": partial(wrk_load, stack.mcp_direct_url, 32, args.seconds, scripts["mcp_direct"]),
            "governed": partial(wrk_load, stack.url(w, "/mcp"), 32, args.seconds, scripts["mcp_governed"]),
        },
    }
    for client, sides in mcp_sides.items():
        point = {side: measured(sides[side], mesh, upstream) for side in sorted(sides, reverse=r % 2 == 1)}
        out[f"mcp_w{w}_c32_{client}"] = point
        print(f"  round {r + 1} MCP {describe(w, 32, client, point)}", flush=True)
    return out


def describe(w: int, c: int, client: str, point: dict[str, Any]) -> str:
    d, g = point["direct"], point["governed"]
    warn = f" NON-2XX {d['non_2xx']:.0f}/{g['non_2xx']:.0f}" if d["non_2xx"] or g["non_2xx"] else ""
    return (
        f"w={w} c={c:>2} {client:>3}: direct {d['rps']:7.0f}/s p50 {d['p50_ms']:6.2f} ms"
        f" | governed {g['rps']:7.0f}/s p50 {g['p50_ms']:6.2f} ms p99 {g['p99_ms']:6.2f} ms"
        f" | ratio {g['rps'] / d['rps']:4.0%} | mesh CPU {g['cpu_ms_per_call'][0]:.3f} ms/call{warn}"
        + (f" | bare {b['rps']:7.0f}/s {b['cpu_ms_per_call'][0]:.3f} ms/call" if (b := point.get("bare")) else "")
    )


def derive(point: dict[str, Any]) -> dict[str, float]:
    """One round's figures for one point."""
    d, g, b = point["direct"], point["governed"], point.get("bare")
    bare = (
        {
            "bare_rps": b["rps"],
            "bare_ratio": b["rps"] / d["rps"],
            "bare_added_p50_ms": b["p50_ms"] - d["p50_ms"],
            "bare_cpu_ms_per_call": b["cpu_ms_per_call"][0],
            "governed_vs_bare": g["rps"] / b["rps"],
        }
        if b
        else {}
    )
    return {
        "direct_rps": d["rps"],
        "governed_rps": g["rps"],
        "direct_p50_ms": d["p50_ms"],
        "governed_p50_ms": g["p50_ms"],
        "governed_p99_ms": g["p99_ms"],
        "added_p50_ms": g["p50_ms"] - d["p50_ms"],
        "ratio": g["rps"] / d["rps"],
        "mesh_cpu_ms_per_call": g["cpu_ms_per_call"][0],
        "mesh_cores_busy": g["cores_busy"][0],
        "upstream_cpu_ms_per_call": d["cpu_ms_per_call"][1],
        "non_2xx": d["non_2xx"] + g["non_2xx"] + (b["non_2xx"] if b else 0),
        **bare,
    }


def medians(rounds: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per point and figure: the median of the rounds' values, and their range."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for key in rounds[0]:
        per_round = [derive(r[key]) for r in rounds]
        out[key] = {
            name: {
                "median": statistics.median(v[name] for v in per_round),
                "min": min(v[name] for v in per_round),
                "max": max(v[name] for v in per_round),
            }
            for name in per_round[0]
        }
    return out


def headline(points: dict[str, dict[str, dict[str, float]]], mcp_workers: int) -> dict[str, dict[str, float]]:
    """The issue's five figures, each {median, min, max}."""
    return {
        "added_p50_ms_c1_w1": points["w1_c1_py"]["added_p50_ms"],
        "ratio_c32_w2_py": points["w2_c32_py"]["ratio"],
        "wrk_rps_c32_w2": points["w2_c32_wrk"]["governed_rps"],
        "cpu_ms_per_call_c32_w2": points["w2_c32_py"]["mesh_cpu_ms_per_call"],
        "mcp_ratio_c32": points[f"mcp_w{mcp_workers}_c32_sdk"]["ratio"],
    }


def _fmt(key: str, v: float) -> str:
    if key.startswith(("ratio", "mcp_ratio")):
        return f"{v:.0%}"
    if key.startswith("added"):
        return f"{v:+.2f} ms"
    if key.startswith("cpu"):
        return f"{v:.2f} ms"
    return f"{v:,.0f}"


Column = tuple[str, Callable[[dict[str, float]], str]]  # a heading, and the cell of one point's medians

_GOVERNED_COLUMNS: list[Column] = [
    ("direct calls/s", lambda m: f"{m['direct_rps']:,.0f}"),
    ("governed calls/s", lambda m: f"{m['governed_rps']:,.0f}"),
    ("ratio", lambda m: f"{m['ratio']:.0%}"),
    ("direct p50", lambda m: f"{m['direct_p50_ms']:.2f} ms"),
    ("governed p50 / p99", lambda m: f"{m['governed_p50_ms']:.2f} / {m['governed_p99_ms']:.2f} ms"),
    ("added p50", lambda m: f"{m['added_p50_ms']:+.2f} ms"),
    ("mesh CPU / call", lambda m: f"{m['mesh_cpu_ms_per_call']:.3f} ms"),
    ("mesh cores busy", lambda m: f"{m['mesh_cores_busy']:.2f}"),
    ("upstream CPU / call", lambda m: f"{m['upstream_cpu_ms_per_call']:.3f} ms"),
]
_BARE_COLUMNS: list[Column] = [
    ("direct calls/s", lambda m: f"{m['direct_rps']:,.0f}"),
    ("bare calls/s", lambda m: f"{m['bare_rps']:,.0f}"),
    ("bare vs direct", lambda m: f"{m['bare_ratio']:.0%}"),
    ("bare added p50", lambda m: f"{m['bare_added_p50_ms']:+.2f} ms"),
    ("bare CPU / call", lambda m: f"{m['bare_cpu_ms_per_call']:.3f} ms"),
    ("governed vs bare", lambda m: f"{m['governed_vs_bare']:.0%}"),
    ("governed CPU / call", lambda m: f"{m['mesh_cpu_ms_per_call']:.3f} ms"),
]


def _point_table(points: dict[str, dict[str, dict[str, float]]], columns: list[Column], needs: str = "") -> list[str]:
    """A markdown table, one row per point (the medians of its rounds) that has the figure `needs`."""
    rows = ["| point | " + " | ".join(name for name, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for key, p in points.items():
        m = {k: v["median"] for k, v in p.items()}
        if not needs or needs in m:
            rows.append(f"| {key.replace('_', ' ')} | " + " | ".join(cell(m) for _, cell in columns) + " |")
    return rows


def markdown(points: dict[str, dict[str, dict[str, float]]], figures: dict[str, dict[str, float]], n: int) -> str:
    rows = [f"| figure | measured (median of {n}; range) | target | |", "|---|---|---|---|"]
    for key, label, target, higher in TARGETS:
        f = figures[key]
        met = f["median"] >= target if higher else f["median"] <= target
        extra = ""
        if key == "wrk_rps_c32_w2":
            extra = f" (direct {points['w2_c32_wrk']['direct_rps']['median']:,.0f})"
        spread = f"{_fmt(key, f['min'])} to {_fmt(key, f['max'])}"
        target_text = ("≥ " if higher else "≤ ") + _fmt(key, target).lstrip("+")
        rows.append(
            f"| {label} | **{_fmt(key, f['median'])}**{extra}; {spread} | {target_text} |"
            f" {'met' if met else '**not met**'} |"
        )
    rows += ["", *_point_table(points, _GOVERNED_COLUMNS)]
    floor = "The floor: a bare forwarder (bench/_bare_proxy.py) on the same server and worker count, no governance."
    rows += ["", floor]
    rows += ["", *_point_table(points, _BARE_COLUMNS, needs="bare_rps")]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=5, help="length of each load segment")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are their medians")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 1 s segments")
    # A smoke run saves under its own name, so it never replaces the figures the docs quote.
    parser.add_argument("--out", help="result files' name under bench/results/ (governed_call, governed_call_quick)")
    parser.add_argument("--repo", help="run the mesh of this checkout (its flux7 package) instead of this one's")
    args = parser.parse_args(argv)
    if args.repo:
        MESH_ENV["PYTHONPATH"] = str(Path(args.repo).resolve())
        MESH_CWD.append(str(Path(args.repo).resolve()))
    if args.quick:
        args.seconds, args.rounds = 1, 1
    args.out = args.out or ("governed_call_quick" if args.quick else "governed_call")
    args.workers, args.concurrency, args.mcp_workers = [1, 2], [1, 32], 2
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="flux7-governed-bench-"))
    scripts = {
        "direct": wrk_script(tmp / "direct.lua", DIRECT_BODY, {}),
        "governed": wrk_script(tmp / "governed.lua", GOVERNED_BODY, AGENT),
    }
    (scripts_mcp_direct := tmp / "mcp_direct.lua").write_text(lua("echo"))
    (scripts_mcp_governed := tmp / "mcp_governed.lua").write_text(lua("echo.echo"))
    scripts |= {"mcp_direct": scripts_mcp_direct, "mcp_governed": scripts_mcp_governed}
    load_before = os.getloadavg()
    stack = Stack(tmp, args.workers, bare=True)
    rounds: list[dict[str, Any]] = []
    try:
        for w in args.workers:  # warm every worker and connection pool
            wrk(stack.url(w, "/tool/echo"), 4, 1, scripts["governed"])
        for r in range(args.rounds):
            rounds.append(run_round(stack, args, r, scripts))
    finally:
        stack.close()
    points = medians(rounds)
    figures = headline(points, args.mcp_workers)
    load = os.getloadavg()
    table = markdown(points, figures, args.rounds)
    table += (
        f"\n{args.rounds} interleaved round(s) of {args.seconds} s segments,"
        f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" load average {load_before[0]:.1f} before, {load[0]:.1f} after ({os.cpu_count()} cores).\n"
    )
    print()
    print(table)
    path = save(
        args.out,
        {
            "seconds_per_segment": args.seconds,
            "rounds": args.rounds,
            "load_average_before": load_before,
            "load_average_after": load,
            "targets": {key: target for key, _, target, _ in TARGETS},
            "figures": figures,
            "points": points,
            "raw_rounds": rounds,
            "note": "loads, backend, MCP upstream and mesh share this machine's cores; read the ratios",
        },
    )
    (RESULTS / f"{args.out}.md").write_text(table)
    print(f"saved {path} and {RESULTS / (args.out + '.md')} (load average after: {load[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
