"""Policy replay over 100,000 traced calls (target: under 10 s on this machine).

A mesh over a fresh SQLite file gets 100,000 trace rows written through the real trace store (chained lines,
in batches of 5,000 per transaction): 200 agents, 40 tools, arguments that conditional rules read. A proposed
set then re-decides all of them through `Governance.replay` (PolicySet.decide + the pipeline's floors), twice:
cold (the set's decision cache empty) and warm. Prints and saves bench/results/governance_replay.json.

    python bench/governance_replay_bench.py [--calls 100000]"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import save
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from flux7.shared.tracing.entry import TraceEntry

CURRENT = """
name: fleet
agent: "*"
rules:
  - tools: ["fs.delete*"]
    action: deny
  - tools: ["fs.write*"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""
PROPOSED = """
name: fleet
agent: "*"
rules:
  - tools: ["fs.delete*"]
    action: deny
  - tools: ["fs.write*"]
    action: allow
    condition: {field: path, operator: starts_with, value: /tmp}
  - tools: ["fs.write*"]
    action: human_approval
  - tools: ["net.*"]
    action: deny
    condition: {field: size, operator: ">", value: 900}
  - tools: ["*"]
    action: allow
"""
SQUAD = """
name: squad
agent: "squad-*"
rules:
  - tools: ["db.*"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""

TOOLS = [
    f"{ns}.{verb}{i}"
    for ns, verb in (("fs", "read"), ("fs", "write"), ("fs", "delete"), ("net", "get"), ("db", "query"))
    for i in range(8)
]


def populate(mesh: Mesh, n: int) -> float:
    rng = random.Random(17)
    agents = [f"agent-{i}" for i in range(150)] + [f"squad-{i}" for i in range(50)]
    start = datetime.now(UTC) - timedelta(days=6)
    store = mesh.tracer.store
    began = time.perf_counter()
    batch = 5000
    for first in range(0, n, batch):
        with mesh.db.write() as conn:
            for i in range(first, min(n, first + batch)):
                tool = rng.choice(TOOLS)
                args = {"path": rng.choice(["/tmp/x", "/etc/passwd", "/home/a"]), "size": rng.randint(1, 1000)}
                decided = mesh.policies.current.decide(agent := rng.choice(agents), tool, args)
                ts = start + timedelta(seconds=i * 5)
                store.insert(
                    conn,
                    TraceEntry(
                        trace_id=f"{i:032x}",
                        session_id=f"s{i // 50}",
                        agent_id=agent,
                        tool=tool,
                        params=args,
                        policy=decided.action,
                        policy_rule=decided.rule,
                        status_code=200 if decided.action == "allow" else 403,
                        timestamp=ts.isoformat().replace("+00:00", "Z"),
                    ),
                )
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "policies").mkdir()
        (root / "policies" / "fleet.yaml").write_text(CURRENT)
        (root / "config.yaml").write_text(
            f"storage_path: {root}/flux7.db\npolicy_dir: policies\nmemory: {{enabled: false}}\n"
        )
        mesh = Mesh(load_settings(root / "config.yaml", env={}))
        write_s = populate(mesh, args.calls)
        print(f"wrote {args.calls} traced calls in {write_s:.1f} s")
        files = {"fleet.yaml": PROPOSED, "squad.yaml": SQUAD}
        runs = []
        for label in ("cold", "warm"):
            began = time.perf_counter()
            report = mesh.governance.replay(files=dict(files), days=7)
            seconds = time.perf_counter() - began
            runs.append((label, seconds, report))
            print(f"replay ({label}): {report['calls']} calls, {report['changed']} changed, {seconds:.2f} s")
        mesh.db.close()
    cold, warm = runs[0], runs[1]
    assert cold[2]["calls"] == args.calls, cold[2]["calls"]
    assert cold[2]["groups"] == warm[2]["groups"], "a replay must be deterministic"
    result = {
        "calls": args.calls,
        "changed": cold[2]["changed"],
        "transitions": cold[2]["transitions"],
        "write_seconds": round(write_s, 2),
        "replay_seconds_cold": round(cold[1], 3),
        "replay_seconds_warm": round(warm[1], 3),
        "calls_per_second": round(args.calls / cold[1]),
        "target_seconds": 10,
        "meets_target": cold[1] < 10,
    }
    path = save("governance_replay", result)
    print(f"saved {path}")
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
