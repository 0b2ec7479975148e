"""Governed POST /tool vs the same upstream called directly, at concurrency 1, 8, 32, with 1 and 2 workers.

Targets (issue 2): <= 1 ms added p50 at c=1; >= 60% of direct throughput at c=32 with 2 workers.
Load comes from wrk (apt-get install wrk) on loopback; the backend is a minimal granian ASGI app (1 worker).
Everything shares this machine's cores, so read the ratios, which are measured side by side in one run."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import free_port, save, wait_http  # noqa: E402

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "bench", "version": "1"},
    "paths": {"/ping": {"get": {"operationId": "ping", "summary": "ping"}}},
}
POLICY = "name: bench\nagent: '*'\nrules:\n  - tools: ['ping']\n    action: allow\n"


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    v = float(m.group(1))
    return {"us": v / 1000, "ms": v, "s": v * 1000}[m.group(2)]


def wrk(url: str, conns: int, seconds: int, script: Path | None = None) -> dict[str, float]:
    cmd = ["wrk", "-t", str(min(conns, 2)), "-c", str(conns), "-d", f"{seconds}s", "--latency", url]
    if script is not None:
        cmd[1:1] = ["-s", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lat = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    done = re.search(r"(\d+) requests in", out)
    return {
        "rps": rps,
        "requests": float(done.group(1)) if done else float("nan"),
        "p50_ms": _ms(lat.get("50", "nan")),
        "p90_ms": _ms(lat.get("90", "nan")),
        "p99_ms": _ms(lat.get("99", "nan")),
        "non_2xx": float(non2xx.group(1)) if non2xx else 0.0,
    }


def start(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def start_backend() -> tuple[subprocess.Popen[bytes], int]:
    """The minimal granian backend (1 worker) on a free port, answering."""
    port = free_port()
    cmd = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port)]
    proc = start([*cmd, "--workers", "1", "--no-ws", "bench._backend_app:app"], env=ENV)
    wait_http(f"http://127.0.0.1:{port}/ping")
    return proc, port


def start_mesh(config: Path, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    """`flux7 serve` with this config on a free port, answering /health."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "flux7.functions.entry",
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
        "--no-access-log",
    ]
    proc = start([*cmd, "--workers", str(workers)], env=ENV)
    wait_http(f"http://127.0.0.1:{port}/health")
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="flux7-bench-"))
    backend, backend_port = start_backend()
    direct_url = f"http://127.0.0.1:{backend_port}/ping"
    (tmp / "spec.json").write_text(json.dumps(SPEC))
    (tmp / "policies").mkdir()
    (tmp / "policies" / "bench.yaml").write_text(POLICY)
    (tmp / "config.yaml").write_text(
        "storage_path: flux7.db\ntrace_file: traces.jsonl\npolicy_dir: policies\nmemory: {enabled: false}\n"
        f"openapi:\n  - file: spec.json\n    backend_url: http://127.0.0.1:{backend_port}\n"
    )
    script = tmp / "post.lua"
    script.write_text(
        'wrk.method = "POST"\nwrk.body = \'{"params": {}}\'\n'
        'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer agent:bench"\n'
    )
    results: dict[str, Any] = {}
    try:
        for workers in [int(w) for w in args.workers.split(",")]:
            mesh, port = start_mesh(tmp / "config.yaml", workers)
            try:
                url = f"http://127.0.0.1:{port}/tool/ping"
                wrk(url, 4, 1, script)  # warm up every worker and connection pool
                for c in [int(x) for x in args.concurrency.split(",")]:
                    direct = wrk(direct_url, c, args.seconds)
                    governed = wrk(url, c, args.seconds, script)
                    row = {
                        "direct": direct,
                        "governed": governed,
                        "added_p50_ms": governed["p50_ms"] - direct["p50_ms"],
                        "throughput_ratio": governed["rps"] / direct["rps"],
                    }
                    results[f"w{workers}_c{c}"] = row
                    print(
                        f"workers={workers} c={c:>2}: direct {direct['rps']:8.0f} req/s p50 {direct['p50_ms']:.2f} ms"
                        f" | governed {governed['rps']:8.0f} req/s p50 {governed['p50_ms']:.2f} ms"
                        f" p99 {governed['p99_ms']:.2f} ms | added p50 {row['added_p50_ms']:+.2f} ms"
                        f" | ratio {row['throughput_ratio']:.0%} | non-2xx {governed['non_2xx']:.0f}",
                        flush=True,
                    )
            finally:
                stop(mesh)
    finally:
        stop(backend)
    path = save(
        "rest_overhead",
        {"seconds_per_point": args.seconds, "targets": {"added_p50_ms_c1": 1.0, "ratio_c32_w2": 0.6}, "runs": results},
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
