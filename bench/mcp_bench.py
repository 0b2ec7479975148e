"""MCP tools/call through the mesh's /mcp vs straight to the upstream MCP server, at concurrency 1, 8, 32; and the
round trip of `mesh7 --mcp` over stdio.

The upstream is the SDK-built echo server (tests/upstreams/servers/mcp_echo.py) over streamable HTTP; the mesh
reaches the same server over streamable HTTP. Both are driven with stateless 2026-07-28 requests (no session)
by wrk on loopback. Target (issue 4): the mesh keeps >= 50% of direct throughput at c=32. Two baselines: the
upstream asked statelessly (its fastest path, JSON answers) and inside a 2024-11-05 session (what the mesh's own
upstream client does, CONTRACT 1.15; the SDK server answers those with an SSE stream). Everything shares this
machine's cores, so read the ratios, measured side by side in one run."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench._common import free_port, save, summary, wait_http  # noqa: E402
from bench.rest_overhead_bench import start, stop, wrk  # noqa: E402

ECHO = ROOT / "tests" / "upstreams" / "servers" / "mcp_echo.py"
MESH7 = "from flux7.functions.entry import mesh7_main; raise SystemExit(mesh7_main())"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Authorization": "Bearer agent:bench",
}


def call_body(tool: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"text": "hello"}, "_meta": META},
    }


def lua(tool: str, session: str = "") -> str:
    """A wrk script: a stateless request, or (with `session`) a request inside a handshake-era session."""
    body = call_body(tool)
    headers = {**HEADERS, "Mcp-Name": tool}
    if session:
        del body["params"]["_meta"]
        headers = {"Content-Type": HEADERS["Content-Type"], "Accept": HEADERS["Accept"], "Mcp-Session-Id": session}
    lines = ['wrk.method = "POST"', f"wrk.body = '{json.dumps(body)}'"]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    return "\n".join(lines) + "\n"


def open_session(url: str) -> str:
    """A 2024-11-05 session with the upstream, as the mesh's own upstream client opens one (CONTRACT 1.15)."""
    accept = {"Accept": HEADERS["Accept"]}
    hello = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}, headers=accept)
    session = r.headers["mcp-session-id"]
    httpx.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={**accept, "Mcp-Session-Id": session},
    )
    return session


def check(url: str, tool: str) -> None:
    """One call first: the load test counts only HTTP status, so make sure the answer is the echo."""
    r = httpx.post(url, json=call_body(tool), headers={**HEADERS, "Mcp-Name": tool}, timeout=30)
    text = r.json()["result"]["content"][0]["text"]
    if r.status_code != 200 or "hello" not in text or "denied" in text:
        raise SystemExit(f"{url} {tool}: unexpected answer {r.status_code} {r.text[:300]}")


def stdio_round_trips(config: Path, n: int) -> dict[str, Any]:
    """Sequential requests to `mesh7 --mcp` (standalone), each timed from the write to the answer line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", MESH7, "--mcp", "--config", str(config), "--port", str(free_port())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=config.parent,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(message: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        t0 = time.perf_counter()
        proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        answer = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        return (time.perf_counter() - t0) * 1000, answer

    try:
        started = time.perf_counter()
        ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
        first_answer_ms = (time.perf_counter() - started) * 1000
        call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo.echo", "arguments": {"text": "hi"}}}
        for i in range(20):  # warm up, and wait for the upstream to be connected
            _, answer = ask({**call, "id": 1000 + i})
            if "result" in answer:
                break
            time.sleep(0.1)
        calls = [ask({**call, "id": i})[0] for i in range(1, n + 1)]
        pings = [ask({"jsonrpc": "2.0", "id": n + i, "method": "ping"})[0] for i in range(1, n + 1)]
    finally:
        proc.stdin.close()
        proc.wait(15)
    return {"first_answer_ms": first_answer_ms, "tools_call_ms": summary(calls), "ping_ms": summary(pings)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--stdio-calls", type=int, default=300)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="flux7-mcp-bench-"))
    up_port = free_port()
    upstream = start([sys.executable, str(ECHO), "--transport", "streamable-http", "--port", str(up_port)])
    direct_url = f"http://127.0.0.1:{up_port}/mcp"
    config = tmp / "config.yaml"
    config.write_text(
        "storage_path: flux7.db\nmemory: {enabled: false}\napproval: {channel: queue}\n"
        f"mcp_servers:\n  - {{name: echo, transport: streamable-http, url: '{direct_url}'}}\n"
        "policies:\n  - name: bench\n    agent: '*'\n    rules: [{tools: ['echo.*'], action: allow}]\n"
    )
    (tmp / "direct.lua").write_text(lua("echo"))
    (tmp / "mesh.lua").write_text(lua("echo.echo"))
    # The same governed call over REST: isolates what the MCP transport adds to the shared pipeline.
    (tmp / "rest.lua").write_text(
        'wrk.method = "POST"\nwrk.body = \'{"params": {"text": "hello"}}\'\n'
        'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer agent:bench"\n'
    )
    results: dict[str, Any] = {}
    try:
        wait_http(direct_url.replace("/mcp", "/"), 30)
        check(direct_url, "echo")
        (tmp / "direct_session.lua").write_text(lua("echo", open_session(direct_url)))
        for workers in [int(w) for w in args.workers.split(",")]:
            port, more = free_port(), ["--workers", str(workers), "--no-access-log"]
            mesh = start(
                [
                    sys.executable,
                    "-m",
                    "flux7.functions.entry",
                    "serve",
                    "--config",
                    str(config),
                    "--port",
                    str(port),
                    "--no-access-log",
                    *more,
                ],
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            mesh_url = f"http://127.0.0.1:{port}/mcp"
            try:
                wait_http(f"http://127.0.0.1:{port}/health")
                for _ in range(100):  # the upstream connects in the background
                    if httpx.get(f"http://127.0.0.1:{port}/health").json()["tools"] > 0:
                        break
                    time.sleep(0.1)
                check(mesh_url, "echo.echo")
                wrk(mesh_url, 4, 1, tmp / "mesh.lua")  # warm every worker and connection pool
                for c in [int(x) for x in args.concurrency.split(",")]:
                    direct = wrk(direct_url, c, args.seconds, tmp / "direct.lua")
                    direct_session = wrk(direct_url, c, args.seconds, tmp / "direct_session.lua")
                    governed = wrk(mesh_url, c, args.seconds, tmp / "mesh.lua")
                    rest = wrk(f"http://127.0.0.1:{port}/tool/echo.echo", c, args.seconds, tmp / "rest.lua")
                    row = {
                        "direct_stateless": direct,
                        "direct_session": direct_session,
                        "through_mesh": governed,
                        "rest_tool": rest,
                        "mcp_vs_rest_ratio": governed["rps"] / rest["rps"],
                        "added_p50_ms_vs_session": governed["p50_ms"] - direct_session["p50_ms"],
                        "throughput_ratio_vs_stateless": governed["rps"] / direct["rps"],
                        "throughput_ratio_vs_session": governed["rps"] / direct_session["rps"],
                    }
                    results[f"w{workers}_c{c}"] = row
                    print(
                        f"workers={workers} c={c:>2}: direct stateless {direct['rps']:6.0f} req/s"
                        f" p50 {direct['p50_ms']:6.2f} ms | direct session {direct_session['rps']:6.0f} req/s"
                        f" p50 {direct_session['p50_ms']:6.2f} ms | via /mcp {governed['rps']:6.0f} req/s"
                        f" p50 {governed['p50_ms']:6.2f} ms p99 {governed['p99_ms']:7.2f} ms"
                        f" | ratio {row['throughput_ratio_vs_stateless']:.0%}"
                        f" / {row['throughput_ratio_vs_session']:.0%} | REST /tool {rest['rps']:6.0f} req/s"
                        f" | non-2xx {direct['non_2xx'] + direct_session['non_2xx']:.0f}/{governed['non_2xx']:.0f}",
                        flush=True,
                    )
            finally:
                stop(mesh)
        stdio = stdio_round_trips(config, args.stdio_calls)
        print(
            f"stdio: first answer {stdio['first_answer_ms']:.0f} ms after start; tools/call p50 "
            f"{stdio['tools_call_ms']['p50']:.2f} ms p95 {stdio['tools_call_ms']['p95']:.2f} ms; "
            f"ping p50 {stdio['ping_ms']['p50']:.2f} ms",
            flush=True,
        )
    finally:
        stop(upstream)
    path = save(
        "mcp_bench",
        {
            "seconds_per_point": args.seconds,
            "targets": {"throughput_ratio_c32": 0.5},
            "http": results,
            "stdio": stdio,
            "note": "wrk, the upstream and the mesh share this machine's cores",
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
