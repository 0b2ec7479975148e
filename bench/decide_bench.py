"""PolicySet.decide() latency at 10, 100 and 1,000 rules (target: <= 5 us median at 1,000 rules).

Rules are spread over exact-agent, wildcard-agent and `*` policies; a third carry conditions. The decided tool sits
near the end of the rule list, so every uncached walk would pay for all rules."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import save, summary
from flux7.shared.gate.policy import PolicySet
from flux7.shared.settings import Condition, Policy, Rule


def build(n_rules: int) -> PolicySet:
    rng = random.Random(7)
    policies: list[Policy] = []
    per = max(1, n_rules // 10)
    made = 0
    i = 0
    while made < n_rules:
        rules = []
        for j in range(min(per, n_rules - made)):
            cond = Condition(field="path", operator="starts_with", value="/etc") if rng.random() < 0.33 else None
            rules.append(Rule(tools=(f"svc{i}.tool{j}*", f"svc{i}.other{j}"), action="allow", condition=cond))
        made += len(rules)
        agent = ["agent-7", "agent-*", "*"][i % 3]
        policies.append(Policy(name=f"p{i}", agent=agent, rules=tuple(rules)))
        i += 1
    policies.append(Policy(name="fallback", agent="*", rules=(Rule(tools=("target.*",), action="human_approval"),)))
    return PolicySet(policies)


def measure(ps: PolicySet, iterations: int = 200_000) -> dict[str, float]:
    args = {"path": "/tmp/file", "n": 3}
    tools = ["target.write", "svc0.tool0x", "nomatch.x"]
    samples: list[float] = []
    for t in tools:
        ps.decide("agent-7", t, args)  # warm the per-(agent, tool) candidate cache
    batch = 100
    for k in range(iterations // batch):
        tool = tools[k % len(tools)]
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            ps.decide("agent-7", tool, args)
        samples.append((time.perf_counter_ns() - t0) / batch / 1000)
    cold: list[float] = []
    for k in range(2000):
        ps._cache.clear()
        t0 = time.perf_counter_ns()
        ps.decide("agent-7", "target.write", args)
        cold.append((time.perf_counter_ns() - t0) / 1000)
        if k > 200:
            break
    return {**{f"warm_{k}": v for k, v in summary(samples).items()}, "cold_p50_us": summary(cold)["p50"]}


def main() -> None:
    results = {}
    for n in (10, 100, 1000):
        ps = build(n)
        r = measure(ps)
        results[str(n)] = r
        print(
            f"{n:>5} rules: decide p50 {r['warm_p50']:.2f} us  p99 {r['warm_p99']:.2f} us"
            f"  (first call per agent/tool, uncached: {r['cold_p50_us']:.1f} us)"
        )
    path = save("decide", {"unit": "microseconds", "rules": results, "target_p50_us_at_1000": 5})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
