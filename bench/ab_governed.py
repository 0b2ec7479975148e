"""Two or more variants of the mesh side by side, interleaved in one run (issue 19): the governed call's CPU per call
and added latency, where one change's effect is smaller than the machine's drift between two separate runs.

A variant is a checkout (`--repo`-style folder holding the `flux7` package) and, optionally, environment settings
for its `flux7 serve`: `label=DIR[,NAME=VALUE...]`. Every variant serves `POST /tool/echo` with the set-up of
bench/governed_call_bench.py (one allow rule, traces on, memory off) in front of one raw echo backend; each round
runs every point against every variant in turn, the order rotating per round, and each figure is the median of
the rounds. Points: the Python client at c=1 on 1 worker (added p50 over the echo called directly in the same
round) and at c=32 on 2 workers, and wrk at c=32 on 2 workers.

Run: python bench/ab_governed.py main=/work/main new=. [--rounds 5] [--seconds 3]"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import governed_call_bench as g  # noqa: E402
from bench._common import free_port, save, wait_http  # noqa: E402

POINTS = [("py", 1, 1), ("py", 32, 2), ("wrk", 32, 2)]  # (client, concurrency, workers)


class Variant:
    def __init__(self, spec: str) -> None:
        self.label, _, rest = spec.partition("=")
        folder, *pairs = rest.split(",")
        self.repo = Path(folder).resolve()
        self.env = dict(g.ENV, PYTHONPATH=str(self.repo))
        self.env.update(dict(p.split("=", 1) for p in pairs))
        self.ports: dict[int, int] = {}
        self.pids: dict[int, int] = {}


def start_mesh(stack: g.Stack, variant: Variant, tmp: Path, workers: int) -> None:
    home = tmp / f"{variant.label}-w{workers}"
    (home / "policies").mkdir(parents=True)
    (home / "spec.json").write_text(g.json.dumps(g.SPEC))
    (home / "policies" / "bench.yaml").write_text(g.POLICY)
    (home / "config.yaml").write_text(
        "storage_path: flux7.db\ntrace_file: traces.jsonl\npolicy_dir: policies\nmemory: {enabled: false}\n"
        f"openapi:\n  - file: spec.json\n    backend_url: http://127.0.0.1:{stack.backend_port}\n"
    )
    port = free_port()
    proc = g.subprocess.Popen(
        [*g.SERVE, "--config", str(home / "config.yaml"), "--port", str(port), "--workers", str(workers)],
        env=variant.env,
        cwd=str(variant.repo),
        stdout=g.subprocess.DEVNULL,
        stderr=g.subprocess.DEVNULL,
        start_new_session=True,
    )
    stack.procs.append(proc)
    variant.ports[workers] = port
    variant.pids[workers] = proc.pid
    wait_http(f"http://127.0.0.1:{port}/health", 60)
    r = g.httpx.post(f"http://127.0.0.1:{port}/tool/echo", json={"params": {"text": "hello"}}, headers=g.AGENT)
    if r.status_code != 200 or "hello" not in r.text:
        raise SystemExit(f"{variant.label}: governed /tool/echo answered {r.status_code} {r.text[:300]}")


def segment(url: str, client: str, conns: int, seconds: int, script: Path, tree: int) -> dict[str, Any]:
    if client == "wrk":
        return g.measured(lambda p: g.wrk_load(url, conns, seconds, script, p), tree)
    body = g.GOVERNED_BODY if "/tool/" in url else g.DIRECT_BODY
    headers = g.AGENT if "/tool/" in url else {}
    return g.measured(lambda p: g.py_load(url, body, headers, conns, seconds, p), tree)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", help="label=DIR[,NAME=VALUE...]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--out", default="ab_governed")
    args = parser.parse_args(argv)
    variants = [Variant(v) for v in args.variants]
    figures: dict[str, dict[str, list[float]]] = {v.label: {} for v in variants}
    with tempfile.TemporaryDirectory(prefix="ab-governed-") as d:
        tmp = Path(d)
        stack = g.Stack.__new__(g.Stack)
        stack.procs = []
        try:
            stack.backend_port = free_port()
            stack.backend = stack._start(
                [*g.GRANIAN, "--port", str(stack.backend_port), "--workers", "1", "--no-ws", "bench._echo_rsgi:app"]
            )
            direct = f"http://127.0.0.1:{stack.backend_port}/echo"
            wait_http(direct)
            for v in variants:
                for w in sorted({w for _, _, w in POINTS}):
                    start_mesh(stack, v, tmp, w)
            wrk_governed = g.wrk_script(tmp / "governed.lua", g.GOVERNED_BODY, g.AGENT)
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for client, conns, w in POINTS:
                    if client == "py" and conns == 1:
                        base = segment(direct, "py", 1, args.seconds, wrk_governed, stack.backend.pid)
                    for v in order:
                        pid = v.pids[w]
                        url = f"http://127.0.0.1:{v.ports[w]}/tool/echo"
                        out = segment(url, client, conns, args.seconds, wrk_governed, pid)
                        key = f"{client} c{conns} w{w}"
                        figures[v.label].setdefault(f"{key} cpu ms/call", []).append(out["cpu_ms_per_call"][0])
                        figures[v.label].setdefault(f"{key} calls/s", []).append(out["rps"])
                        if client == "py" and conns == 1:
                            figures[v.label].setdefault(f"{key} added p50 ms", []).append(
                                out["p50_ms"] - base["p50_ms"]
                            )
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            stack.close()
    keys = list(figures[variants[0].label])
    first = variants[0].label
    head = f"| figure (median of {args.rounds} rounds) | " + " | ".join(v.label for v in variants)
    lines = [head + " | " + " | ".join(f"{v.label}/{first}" for v in variants[1:]) + " |"]
    lines.append("|---" * (1 + 2 * len(variants) - 1) + "|")
    medians = {v.label: {k: statistics.median(x) for k, x in figures[v.label].items()} for v in variants}
    for k in keys:
        cells = [f"{medians[v.label][k]:,.3f}" if "ms" in k else f"{medians[v.label][k]:,.0f}" for v in variants]
        ratios = [
            f"×{medians[v.label][k] / medians[first][k]:.2f}" if medians[first][k] > 0 else "-" for v in variants[1:]
        ]
        lines.append(f"| {k} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    table = "\n".join(lines)
    print(table)
    variant_specs = {v.label: spec for v, spec in zip(variants, args.variants, strict=True)}
    save(args.out, {"variants": variant_specs, "rounds": figures, "medians": medians, "table": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
