"""`POST /tool` throughput with rate limits and loop detection on vs off (issue 3), side by side in one run.

Two policies over the same upstream: one without `rate_limit`, one with a limit high enough never to refuse, so
every call is checked and recorded in SQLite. Each request carries distinct arguments (a counter), so loop
detection runs but never fires. Load from wrk on loopback, 2 granian workers."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import save  # noqa: E402
from bench.rest_overhead_bench import SPEC, start_backend, start_mesh, stop, wrk  # noqa: E402

LUA = """
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
counter = 0
request = function()
  counter = counter + 1
  local body = string.format('{"params": {"thread": %d, "n": %d}}', tid, counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json",
                                  ["Authorization"] = "Bearer agent:bench-" .. (counter % 50)}, body)
end
"""


def policy(limited: bool) -> str:
    limit = "rate_limit: {max_per_minute: 100000000, max_total: 0}\n" if limited else ""
    return f"name: bench\nagent: '*'\n{limit}rules:\n  - tools: ['ping']\n    action: allow\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    backend, backend_port = start_backend()
    results: dict[str, Any] = {}
    try:
        for label, limited in (("off", False), ("on", True), ("off_again", False)):
            tmp = Path(tempfile.mkdtemp(prefix="flux7-limits-"))
            (tmp / "spec.json").write_text(json.dumps(SPEC))
            (tmp / "policies").mkdir()
            (tmp / "policies" / "bench.yaml").write_text(policy(limited))
            (tmp / "config.yaml").write_text(
                "storage_path: flux7.db\ntrace_file: traces.jsonl\npolicy_dir: policies\nmemory: {enabled: false}\n"
                "loop_detection: {enabled: true}\n"
                f"openapi:\n  - file: spec.json\n    backend_url: http://127.0.0.1:{backend_port}\n"
            )
            (tmp / "req.lua").write_text(LUA)
            mesh, port = start_mesh(tmp / "config.yaml", args.workers)
            try:
                url = f"http://127.0.0.1:{port}/tool/ping"
                # no warm-up run: it would repeat the same arguments and trip loop detection
                r = wrk(url, args.concurrency, args.seconds, tmp / "req.lua")
                results[label] = r
                print(
                    f"rate limits {label:>9}: {r['rps']:7.0f} req/s p50 {r['p50_ms']:.2f} ms"
                    f" p99 {r['p99_ms']:.2f} ms non-2xx {r['non_2xx']:.0f}",
                    flush=True,
                )
            finally:
                stop(mesh)
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        stop(backend)
    off = (results["off"]["rps"] + results["off_again"]["rps"]) / 2
    ratio = results["on"]["rps"] / off
    print(f"throughput with limits on / off: {ratio:.0%}")
    saved = save(
        "limits", {"workers": args.workers, "concurrency": args.concurrency, "runs": results, "on_over_off": ratio}
    )
    print(f"saved {saved}")


if __name__ == "__main__":
    main()
