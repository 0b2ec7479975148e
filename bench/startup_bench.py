"""Serverless readiness (DESIGN "Serverless-friendly"): process start to the first answered request, and the idle
RSS of one worker before the embedding model loads. Targets: <= 1.5 s to first answer; < 150 MB idle RSS per worker.

Runs `flux7 serve` with the example config (memory role on, hybrid on, model not yet loaded) several times."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import free_port, save, summary  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def one_run() -> tuple[float, float]:
    tmp = Path(tempfile.mkdtemp(prefix="flux7-start-"))
    shutil.copy(ROOT / "config.example.yaml", tmp / "config.yaml")
    shutil.copytree(ROOT / "policies", tmp / "policies")
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flux7.functions.entry",
            "serve",
            "--config",
            str(tmp / "config.yaml"),
            "--port",
            str(port),
        ],
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.perf_counter() - started > 30:
                raise TimeoutError("no answer in 30 s")
            time.sleep(0.005)
        first = time.perf_counter() - started
        for _ in range(20):  # some traffic, then idle
            httpx.post(
                f"http://127.0.0.1:{port}/tool/clock.run",
                json={"params": {"args": ["-u"]}},
                headers={"Authorization": "Bearer agent:bench"},
            )
        workers = children(proc.pid)
        rss = max((rss_mb(p) for p in workers), default=float("nan"))
        return first, rss
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    firsts, rsses = [], []
    for _ in range(5):
        first, rss = one_run()
        firsts.append(first)
        rsses.append(rss)
        print(f"first answer {first * 1000:.0f} ms, worker RSS {rss:.0f} MB", flush=True)
    s_first, s_rss = summary(firsts), summary(rsses)
    print(
        f"median: first answer {s_first['p50'] * 1000:.0f} ms (target 1500),"
        f" worker RSS {s_rss['p50']:.0f} MB (target 150)"
    )
    print(f"saved {save('startup', {'first_answer_s': s_first, 'worker_rss_mb': s_rss})}")


if __name__ == "__main__":
    main()
