"""What the upstream layer adds to a forwarded call, and what each source costs per call.

- openapi: registry.call() against a real HTTP backend on loopback, versus the same GET sent directly with one
  keep-alive httpx client (the difference is the layer's overhead; target <= 1 ms p50 for the governed call).
- mcp: tools/call round trips to the SDK-built echo server over stdio and over streamable HTTP, one at a time
  (latency) and 1, 8, 32 at once (throughput, req/s: calls held back by the client would show as a flat line).
- cli: spawning `echo` (no shell).
- lookup: exact name and a cached CLI catch-all, in microseconds.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import msgspec  # noqa: E402

from bench._common import free_port, save, summary  # noqa: E402
from flux7.shared.settings import Settings  # noqa: E402
from flux7.shared.upstreams import CallContext, Registry  # noqa: E402

SERVERS = ROOT / "tests" / "upstreams" / "servers"
CTX = CallContext(
    trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    agent_id="bench",
)


def _wait_port(port: int) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(port)


async def _timed(fn: Any, n: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        await fn()
    out: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def _throughput(fn: Any, concurrency: int, seconds: float) -> float:
    """Calls per second with `concurrency` callers each calling in a loop for `seconds`."""
    done = 0
    stop = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await fn()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


async def main(n: int = 2000) -> dict[str, Any]:
    http_port, mcp_port = free_port(), free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(SERVERS / "http_backend.py"), "--port", str(http_port)],
            stdout=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [
                sys.executable,
                str(SERVERS / "mcp_echo.py"),
                "--transport",
                "streamable-http",
                "--port",
                str(mcp_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    try:
        _wait_port(http_port)
        _wait_port(mcp_port)
        base = f"http://127.0.0.1:{http_port}"
        settings = msgspec.convert(
            {
                "openapi": [{"url": f"{base}/openapi.json"}],
                "mcp_servers": [
                    {
                        "name": "st",
                        "transport": "stdio",
                        "command": sys.executable,
                        "args": [str(SERVERS / "mcp_echo.py")],
                    },
                    {"name": "sh", "transport": "streamable-http", "url": f"http://127.0.0.1:{mcp_port}/mcp"},
                ],
                "cli_tools": [{"name": "say", "bin": "echo", "commands": {"hi": {}}}],
            },
            Settings,
        )
        reg = Registry(settings)
        await reg.start()
        pet = reg.lookup("get_pet_by_id")
        assert pet is not None
        async with httpx.AsyncClient() as direct:
            headers = {
                "Content-Type": "application/json",
                "X-Trace-Id": CTX.trace_id,
                "Traceparent": CTX.traceparent,
            }

            async def raw() -> None:
                (await direct.get(f"{base}/pets/1", headers=headers)).json()

            async def governed() -> None:
                res = await reg.call(pet, {"petId": "1"}, CTX)
                assert res.status_code == 200

            # Interleave the two so drift in the backend affects both alike.
            direct_ms: list[float] = []
            layer_ms: list[float] = []
            for _ in range(4):
                direct_ms += await _timed(raw, n // 4)
                layer_ms += await _timed(governed, n // 4)
        st, sh, say = reg.lookup("st.echo"), reg.lookup("sh.echo"), reg.lookup("say.hi")
        assert st and sh and say

        async def mcp_stdio() -> None:
            assert (await reg.call(st, {"text": "x"}, CTX)).status_code == 200

        async def mcp_http() -> None:
            assert (await reg.call(sh, {"text": "x"}, CTX)).status_code == 200

        async def cli() -> None:
            assert (await reg.call(say, {"args": ["x"]}, CTX)).status_code == 200

        stdio_ms = await _timed(mcp_stdio, n // 2)
        http_ms = await _timed(mcp_http, n // 4)
        cli_ms = await _timed(cli, 200, warmup=10)
        throughput = {
            f"{label}_c{c}_rps": await _throughput(fn, c, 2.0)
            for label, fn in (("mcp_stdio", mcp_stdio), ("mcp_streamable_http", mcp_http))
            for c in (1, 8, 32)
        }
        upstream = reg.server("sh")
        protocol = getattr(upstream, "protocol", "2024-11-05")  # what the client agreed with the server
        lookups = 200_000
        t = time.perf_counter()
        for _ in range(lookups):
            reg.lookup("get_pet_by_id")
        exact_us = (time.perf_counter() - t) / lookups * 1e6
        t = time.perf_counter()
        for _ in range(lookups):
            reg.lookup("say.other")
        dispatch_us = (time.perf_counter() - t) / lookups * 1e6
        await reg.stop()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    d, g = summary(direct_ms), summary(layer_ms)
    return {
        "unit": "ms",
        "openapi_direct_httpx": d,
        "openapi_registry_call": g,
        "openapi_overhead_p50_ms": g["p50"] - d["p50"],
        "mcp_stdio_call": summary(stdio_ms),
        "mcp_streamable_http_call": summary(http_ms),
        "mcp_streamable_http_protocol": protocol,
        **throughput,
        "cli_echo_call": summary(cli_ms),
        "lookup_exact_us": exact_us,
        "lookup_cli_catch_all_cached_us": dispatch_us,
    }


if __name__ == "__main__":
    figures = asyncio.run(main())
    for key, value in figures.items():
        if isinstance(value, dict):
            p50, p95, p99 = value["p50"], value["p95"], value["p99"]
            print(f"{key:32} p50 {p50:.3f}  p95 {p95:.3f}  p99 {p99:.3f}  (n={value['n']})")
        else:
            print(f"{key:32} {value:.3f}" if isinstance(value, float) else f"{key:32} {value}")
    print("saved", save("upstreams", figures))
