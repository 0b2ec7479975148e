"""The mesh's own Python CPU per call, POST /mcp `tools/call` against `POST /tool/{name}`, without granian or a
load generator in the way (issue 19): the ASGI app of one checkout runs in this process and is called directly,
sequentially and 32 calls at a time; CPU is this process's time (time.process_time) over the calls. The tool is
the raw echo backend (granian RSGI, another process) behind an OpenAPI entry and the SDK's echo server behind an
MCP entry, so both transports reach the same upstream. A machine busy elsewhere slows this less than the wall
clock, and an A/B of two checkouts (`--repo DIR`, each run in its own process) shows what an edge change is worth;
the count of Python function calls per call (cProfile, 200 sequential calls) is not moved by the load at all.

Run: python bench/mcp_edge_bench.py [--calls 3000] [--repo /work/main]"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = Path(__file__).with_name("_mcp_edge_child.py")  # run with the checkout under test first on the path


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from bench._common import free_port, save, wait_http
    from bench.governed_call_bench import GRANIAN, SPEC
    from bench.mcp_bench import ECHO
    from bench.rest_overhead_bench import ENV, start, stop

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repo", action="append", default=[], help="a checkout to compare (this one always runs)")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="flux7-mcp-edge-"))
    backend_port, mcp_port = free_port(), free_port()
    procs = [
        start([*GRANIAN, "--port", str(backend_port), "--workers", "1", "--no-ws", "bench._echo_rsgi:app"], ENV),
        start([sys.executable, str(ECHO), "--transport", "streamable-http", "--port", str(mcp_port)], ENV),
    ]
    try:
        wait_http(f"http://127.0.0.1:{backend_port}/echo")
        wait_http(f"http://127.0.0.1:{mcp_port}/", 30)
        repos = [str(ROOT), *[str(Path(r).resolve()) for r in args.repo]]
        results: dict[str, list[dict[str, float]]] = {r: [] for r in repos}
        for round_ in range(args.rounds):
            for repo in repos if round_ % 2 == 0 else list(reversed(repos)):
                home = tmp / f"r{round_}-{len(results[repo])}-{abs(hash(repo))}"
                (home / "policies").mkdir(parents=True)
                (home / "spec.json").write_text(json.dumps(SPEC))
                (home / "policies" / "bench.yaml").write_text(
                    "name: bench\nagent: '*'\nrules:\n  - tools: ['echo', 'echo.*']\n    action: allow\n"
                )
                (home / "config.yaml").write_text(
                    "storage_path: flux7.db\ntrace_file: traces.jsonl\npolicy_dir: policies\nmemory: {enabled: false}\n"
                    f"openapi:\n  - file: spec.json\n    backend_url: http://127.0.0.1:{backend_port}\n"
                    f"mcp_servers:\n  - {{name: echo, transport: streamable-http, url: 'http://127.0.0.1:{mcp_port}/mcp'}}\n"
                )
                done = subprocess.run(
                    [sys.executable, str(CHILD), str(home / "config.yaml"), str(args.calls)],
                    env={**os.environ, "PYTHONPATH": repo},
                    cwd=home,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                if done.returncode != 0:
                    raise SystemExit(f"{repo}: {done.stderr[-2000:]}")
                results[repo].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(repo, {k: round(v) for k, v in results[repo][-1].items()}, flush=True)
    finally:
        for proc in procs:
            stop(proc)
    load = os.getloadavg()
    save("mcp_edge", {"calls": args.calls, "rounds": args.rounds, "load_average_after": load, "results": results})
    print("\nµs of mesh CPU per call (median of rounds), and Python function calls per call; load average", load[0])
    keys = list(results[repos[0]][0])
    print("| call | " + " | ".join(Path(r).name for r in repos) + " |")
    print("|---|" + "---|" * len(repos))
    for key in keys:
        cells = [sorted(x[key] for x in results[r])[len(results[r]) // 2] for r in repos]
        print(f"| {key} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")  # µs, or function calls
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
