"""Approval release latency: from sending a resolve to the blocked /tool call's response.

Two granian processes (one worker each) share one SQLite file. A call blocks on process A; the resolve goes
to A itself ("same worker": the in-process event) or to B ("other worker": A's poller sees the row change).
Resolves are denials, so the released call returns at once without running an upstream tool.
`core_other_process` measures the mechanism alone: a wait here, the resolve in a child process, no HTTP.

    python bench/approvals_bench.py [--rounds 100]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import free_port, save, summary, wait_http

ROOT = Path(__file__).resolve().parent.parent
AGENT = {"Authorization": "Bearer agent:bench"}
ADMIN_TOKEN = "bench-admin-token-0123456789"  # the control plane (/approvals) answers the admin only


def start_server(config: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "FLUX7_CONFIG": str(config)}
    env.pop("MESH_ADMIN_TOKEN", None)
    cmd = [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--workers",
        "1",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-log",
        "flux7.functions.asgi:app_factory",
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", timeout=60)
    return proc, url


def one_round(client: httpx.Client, blocked_url: str, resolve_url: str, round_: int) -> dict[str, float]:
    done: dict[str, float] = {}

    def call() -> None:
        with httpx.Client(timeout=60) as c:
            c.post(f"{blocked_url}/tool/echo.run", json={"args": [str(round_)]}, headers=AGENT)
        done["at"] = time.perf_counter()

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 20
    pending: list[dict[str, Any]] = []
    while not pending:
        pending = client.get(f"{resolve_url}/approvals").json()
        if time.monotonic() > deadline:
            raise TimeoutError("no pending approval")
        if not pending:
            time.sleep(0.002)
    sent = time.perf_counter()
    r = client.post(f"{resolve_url}/approvals/{pending[0]['id']}/deny", json={"resolved_by": "bench"})
    answered = time.perf_counter()
    assert r.status_code == 200, r.text
    t.join(30)
    return {"release_ms": (done["at"] - sent) * 1000, "resolve_rtt_ms": (answered - sent) * 1000}


def _resolver(db_dir: str, ids: Any, sent: Any) -> None:
    from flux7.shared.mesh import Mesh
    from flux7.shared.settings import load_settings

    mesh = Mesh(load_settings(None, env={}, storage_path=f"{db_dir}/core.db", memory={"enabled": False}))
    while (approval_id := ids.get()) is not None:
        at = time.time()
        mesh.approvals.resolve(approval_id, "deny", resolved_by="bench", resolver="")  # "": the admin credential
        sent.put(at)


async def _core_rounds(db_dir: str, rounds: int) -> list[float]:
    """The mechanism alone: a wait in this process, the resolve in another process, no HTTP."""
    import asyncio
    import multiprocessing

    from flux7.shared.mesh import Mesh
    from flux7.shared.settings import load_settings

    mesh = Mesh(load_settings(None, env={}, storage_path=f"{db_dir}/core.db", memory={"enabled": False}))
    ids: Any = multiprocessing.Queue()
    sent: Any = multiprocessing.Queue()
    child = multiprocessing.Process(target=_resolver, args=(db_dir, ids, sent))
    child.start()
    out: list[float] = []
    try:
        for i in range(rounds):
            a = mesh.approvals.submit(
                agent="bench", tool="t", arguments={"i": i}, trace_id="", policy_rule="p", policy_version=""
            )
            waiter = asyncio.create_task(mesh.approvals.wait(a.id, 30))
            while mesh.approvals.waiting() < 1:
                await asyncio.sleep(0.001)
            ids.put(a.id)
            await waiter
            done = time.time()
            out.append((done - sent.get(timeout=30)) * 1000)
    finally:
        ids.put(None)
        child.join(10)
        mesh.db.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flux7-approvals-bench-"))
    config = tmp / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage_path": str(tmp / "flux7.db"),
                "memory": {"enabled": False},
                "auth": {"admin_token": ADMIN_TOKEN},
                "cli_tools": [{"name": "echo", "bin": "/bin/echo", "bare": {}}],
                "policies": [{"name": "gate", "agent": "*", "rules": [{"tools": ["*"], "action": "human_approval"}]}],
            }
        )
    )
    procs = []
    try:
        a, url_a = start_server(config)
        procs.append(a)
        b, url_b = start_server(config)
        procs.append(b)
        results: dict[str, Any] = {}
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
            for _ in range(5):  # warm both processes' code paths
                one_round(client, url_a, url_a, -1)
                one_round(client, url_a, url_b, -1)
            for name, resolve_url in (("same_worker", url_a), ("other_worker", url_b)):
                rounds = [one_round(client, url_a, resolve_url, i) for i in range(args.rounds)]
                results[name] = {
                    "release_ms": summary([r["release_ms"] for r in rounds]),
                    "resolve_rtt_ms": summary([r["resolve_rtt_ms"] for r in rounds]),
                }
        import asyncio

        results["core_other_process"] = {"release_ms": summary(asyncio.run(_core_rounds(str(tmp), args.rounds)))}
        for name, figures in results.items():
            rel = figures["release_ms"]
            rtt = figures.get("resolve_rtt_ms")
            extra = f"   (resolve request p50 {rtt['p50']:.1f} ms)" if rtt else ""
            print(
                f"{name:>18}: release p50 {rel['p50']:.1f} ms  p95 {rel['p95']:.1f} ms  p99 {rel['p99']:.1f} ms" + extra
            )
        print("target: other_worker release p95 <= 50 ms")
        path = save(
            "approvals",
            {
                "description": "time from sending POST /approvals/{id}/deny to the blocked POST /tool response",
                "setup": "2 granian processes x 1 worker, one SQLite file, poll interval 10 ms",
                "rounds": args.rounds,
                "load_average_1m": os.getloadavg()[0],
                "target_p95_ms_other_worker": 50,
                **results,
            },
        )
        print(f"saved {path}")
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)


if __name__ == "__main__":
    main()
