"""Where an MCP `tools/call` through `/mcp` spends the mesh's CPU (issue 19): py-spy samples `flux7 serve` (every
worker) while wrk drives stateless 2026-07-28 `tools/call`s at c=32 against `/mcp`, the upstream being the SDK's
echo server over streamable HTTP (the set-up of bench/governed_call_bench.py's MCP point). The samples are
attributed to the categories of bench/profile_governed.py. Before the recording, the mesh's CPU per call is
measured for `/mcp` and for the same tool called through REST (`POST /tool/echo.echo`), which isolates what the
MCP edge adds to the shared pipeline and upstream client.

Run as root (py-spy needs ptrace): python bench/profile_mcp.py [--seconds 10] [--label before] [--repo DIR]"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, save  # noqa: E402
from bench.governed_call_bench import MESH_CWD, MESH_ENV, Stack, tree_cpu, wrk_script  # noqa: E402
from bench.mcp_bench import lua  # noqa: E402
from bench.profile_governed import attribute, compact, markdown, record  # noqa: E402
from bench.rest_overhead_bench import wrk  # noqa: E402

AGENT = {"Authorization": "Bearer agent:bench"}
REST_BODY = b'{"params": {"text": "hello"}}'
SDK_LOAD = """import sys; sys.path.insert(0, {root!r})
from bench.governed_call_bench import AGENT, Probe, sdk_load
print("rps", sdk_load({url!r}, "echo.echo", AGENT, 32, {seconds}, Probe())["rps"])
"""


def cpu_per_call(mesh: int, url: str, script: Path, seconds: int) -> tuple[float, float]:
    """(mesh CPU ms per call, calls/s) of wrk at c=32 for `seconds`."""
    before = tree_cpu(mesh)
    out = wrk(url, 32, seconds, script)
    cpu = tree_cpu(mesh) - before
    return cpu * 1000 / max(out["requests"], 1.0), out["rps"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=10, help="length of the recording")
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--label", default="before")
    parser.add_argument("--no-profile", action="store_true", help="only the CPU per call, no py-spy recording")
    parser.add_argument("--repo", help="run the mesh of this checkout instead of this one's")
    parser.add_argument("--client", choices=("wrk", "sdk"), default="wrk", help="the load during the recording")
    args = parser.parse_args(argv)
    if args.repo:
        MESH_ENV["PYTHONPATH"] = str(Path(args.repo).resolve())
        MESH_CWD.append(str(Path(args.repo).resolve()))
    for tool in ("wrk", "py-spy"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed")
    tmp = Path(tempfile.mkdtemp(prefix="flux7-profile-mcp-"))
    mcp_script = tmp / "mcp.lua"
    mcp_script.write_text(lua("echo.echo"))
    rest_script = wrk_script(tmp / "rest.lua", REST_BODY, AGENT)
    stack = Stack(tmp, [args.workers])
    load: subprocess.Popen[str] | None = None
    try:
        mesh = stack.meshes[args.workers][0].pid
        mcp_url, rest_url = stack.url(args.workers, "/mcp"), stack.url(args.workers, "/tool/echo.echo")
        wrk(mcp_url, 4, 1, mcp_script)
        wrk(rest_url, 4, 1, rest_script)
        figures = {}
        for name, url, script in (("mcp", mcp_url, mcp_script), ("rest", rest_url, rest_script)) * 2:
            ms, rps = cpu_per_call(mesh, url, script, 4)
            figures.setdefault(name, []).append((ms, rps))
            print(f"{name:>4}: {ms:.3f} ms of mesh CPU per call, {rps:.0f} calls/s", flush=True)
        if args.no_profile:
            return 0
        raw = RESULTS / f"profile_mcp_{args.label}.txt.gz"
        load_seconds = args.seconds + 4
        command = ["wrk", "-t", "2", "-c", "32", "-d", f"{load_seconds}s", "-s", str(mcp_script), mcp_url]
        if args.client == "sdk":  # the official SDK client, 32 calls in flight (bench/governed_call_bench.py)
            command = [sys.executable, "-c", SDK_LOAD.format(root=str(ROOT), url=mcp_url, seconds=load_seconds)]
        load = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        cpu_before, t0 = tree_cpu(mesh), time.monotonic()
        record(mesh, args.seconds, args.rate, "raw", tmp / "raw.txt", True)
        cpu_seconds, wall = tree_cpu(mesh) - cpu_before, time.monotonic() - t0
        out, _ = load.communicate(timeout=load_seconds + 30)
    finally:
        if load is not None and load.poll() is None:
            load.kill()
        stack.close()
    raw.write_bytes(gzip.compress(compact((tmp / "raw.txt").read_text()).encode()))
    rps_match = re.search(r"Requests/sec:\s+([\d.]+)", out) or re.search(r"rps ([\d.]+)", out)
    rps = float(rps_match.group(1)) if rps_match else float("nan")
    summary = attribute((tmp / "raw.txt").read_text())
    ms_per_call = cpu_seconds * 1000 / (rps * wall)
    print(markdown(summary, ms_per_call))
    print(f"≈ {ms_per_call:.2f} ms of mesh CPU per MCP call under the profiler ({rps:.0f} calls/s)")
    for leaf, share in summary["top_leaves"].items():
        print(f"  {share:5.1%} {leaf}")
    save(f"profile_mcp_{args.label}", {"figures": figures, "cpu_ms_per_call": ms_per_call, **summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
