"""The governed call's storage path (issue 19): SQLite statements and commits per call, and the mesh server's CPU
per call, for one checkout, so a change is measured before and after on the same machine in one sitting.

    python bench/storage_path_bench.py                      # this checkout
    python bench/storage_path_bench.py --repo /tmp/base     # another checkout (e.g. `git archive <commit>`)

Statements: the in-process app (a real SQLite file), c=1 and c=32, counted with sqlite3's trace callback on the
write connection. CPU: `flux7 serve` (granian) over a minimal backend, loaded with `wrk` at c=32 (1 and 2
workers), the server's process-group CPU time (/proc) divided by the calls it answered. The machine is shared,
so compare ratios of runs made side by side, not the absolute numbers."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POLICY = 'name: bench\nagent: "*"\nrules:\n  - tools: ["ping"]\n    action: allow\n'
SPEC = {
    "openapi": "3.0.0",
    "info": {"title": "bench", "version": "1"},
    "paths": {"/ping": {"get": {"operationId": "ping", "summary": "ping"}}},
}


def _write_config(tmp: Path, backend_url: str) -> Path:
    (tmp / "spec.json").write_text(json.dumps(SPEC))
    (tmp / "policies").mkdir(exist_ok=True)
    (tmp / "policies" / "bench.yaml").write_text(POLICY)
    cfg = tmp / "config.yaml"
    cfg.write_text(
        f"storage_path: {tmp}/flux7.db\ntrace_file: {tmp}/traces.jsonl\npolicy_dir: policies\n"
        "memory: {enabled: false}\nauth: {open_loopback: true}\n"
        f"openapi:\n  - file: spec.json\n    backend_url: {backend_url}\n"
    )
    return cfg


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


def _start(cmd: list[str], repo: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{repo}:{HERE.parent}"}
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=str(repo)
    )


_FLUX7 = [sys.executable, "-m", "flux7.functions.entry"]
_GRANIAN = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--workers", "1", "--no-ws"]


def _backend(port: int) -> subprocess.Popen[bytes]:
    """The minimal echo backend (bench/_backend_app.py), one granian worker."""
    return _start([*_GRANIAN, "--port", str(port), "bench._backend_app:app"], HERE.parent)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def _group_cpu(pgid: int) -> float:
    """User + system CPU seconds of every live process in a process group (granian's main and workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:  # field 5: pgrp
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _wrk(url: str, conns: int, seconds: int, script: Path) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t", "2", "-c", str(conns), "-d", f"{seconds}s", "-s", str(script), "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return {
        "requests": float(total.group(1)) if total else 0.0,
        "non_2xx": float(non2xx.group(1)) if non2xx else 0.0,
        "rps": float(rps.group(1)) if rps else 0.0,
    }


def server_cpu(repo: Path, workers: int, seconds: int, conns: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="flux7-storage-bench-"))
    bport = _free_port()
    backend = _backend(bport)
    mesh: subprocess.Popen[bytes] | None = None
    try:
        _wait_http(f"http://127.0.0.1:{bport}/ping")
        cfg = _write_config(tmp, f"http://127.0.0.1:{bport}")
        port = _free_port()
        mesh = _start(
            [*_FLUX7, "serve", "--config", str(cfg), "--port", str(port), "--no-access-log", "--workers", str(workers)],
            repo,
        )
        _wait_http(f"http://127.0.0.1:{port}/health")
        script = tmp / "post.lua"
        script.write_text(
            'wrk.method = "POST"\nwrk.body = \'{"arguments": {}}\'\n'
            'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer agent:bench"\n'
        )
        url = f"http://127.0.0.1:{port}/tool/ping"
        _wrk(url, 4, 1, script)  # warm up
        before = _group_cpu(mesh.pid)
        run = _wrk(url, conns, seconds, script)
        cpu = _group_cpu(mesh.pid) - before
        calls = run["requests"]
        return {
            "calls": calls,
            "rps": run["rps"],
            "non_2xx": run["non_2xx"],
            "cpu_s": cpu,
            "cpu_ms_per_call": 1000 * cpu / calls if calls else float("nan"),
        }
    finally:
        if mesh is not None:
            _stop(mesh)
        _stop(backend)
        shutil.rmtree(tmp, ignore_errors=True)


def statements(repo: Path, calls: int, conns: int) -> dict[str, float]:
    """Run in a child interpreter importing `repo`'s flux7, so two checkouts are compared alike."""
    code = f"""
import asyncio, json, sys, tempfile, threading
from pathlib import Path
sys.path.insert(0, {str(HERE)!r})
from storage_path_bench import _in_process_counts
print(json.dumps(asyncio.run(_in_process_counts({calls}, {conns}))))
"""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=repo)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


async def _in_process_counts(calls: int, conns: int) -> dict[str, float]:
    import threading

    import httpx

    from flux7.functions.app import create_app
    from flux7.shared.mesh import Mesh
    from flux7.shared.settings import load_settings

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bport = _free_port()
        backend = _backend(bport)
        try:
            _wait_http(f"http://127.0.0.1:{bport}/ping")
            mesh = Mesh(load_settings(_write_config(tmp, f"http://127.0.0.1:{bport}"), env={}))
            app = create_app(mesh)
            await mesh.start()
            seen: list[str] = []
            lock = threading.Lock()

            def count(sql: str) -> None:
                with lock:
                    seen.append(sql)

            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
            headers = {"Authorization": "Bearer agent:bench"}
            async with httpx.AsyncClient(transport=transport, base_url="http://mesh", headers=headers) as client:
                await client.post("/tool/ping", json={"arguments": {}})  # warm up (label values admitted)
                mesh.db._writer.set_trace_callback(count)  # the write connection, in either checkout
                queue = list(range(calls))
                started = time.process_time()

                async def worker() -> None:
                    while queue:
                        queue.pop()
                        r = await client.post("/tool/ping", json={"arguments": {}})
                        assert r.status_code == 200, r.text

                await asyncio.gather(*(worker() for _ in range(conns)))
                cpu = time.process_time() - started
                mesh.db._writer.set_trace_callback(None)
            await mesh.stop()
        finally:
            _stop(backend)
    commits = sum(1 for s in seen if s.strip().upper() == "COMMIT")
    return {
        "calls": calls,
        "statements_per_call": len(seen) / calls,
        "commits_per_call": commits / calls,
        "in_process_cpu_ms_per_call": 1000 * cpu / calls,  # app + in-process client: a relative figure only
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, default=HERE.parent)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()
    repo = args.repo.resolve()
    result: dict[str, Any] = {"repo": str(repo)}
    for c in (1, 32):
        counts = statements(repo, args.calls, c)
        result[f"inproc_c{c}"] = counts
        print(
            f"in-process c={c:>2}: {counts['statements_per_call']:.2f} statements/call, "
            f"{counts['commits_per_call']:.3f} commits/call, {counts['in_process_cpu_ms_per_call']:.3f} ms CPU/call",
            flush=True,
        )
    if not args.skip_server:
        if not shutil.which("wrk"):
            raise SystemExit("wrk is needed for the server CPU figure (apt-get install wrk), or --skip-server")
        for w in [int(x) for x in args.workers.split(",")]:
            cpu = server_cpu(repo, w, args.seconds, 32)
            result[f"server_w{w}_c32"] = cpu
            print(
                f"server workers={w} c=32: {cpu['rps']:.0f} calls/s, {cpu['cpu_ms_per_call']:.3f} ms CPU/call"
                f" (non-2xx {cpu['non_2xx']:.0f})",
                flush=True,
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
