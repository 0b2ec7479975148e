"""Level-1 precedent check latency with 10,000 stored decisions, and sup7's rule decision latency.

Precedents: 10,000 decision facts over 2,500 tool + agent couples (human, supervisor and mem7 approvals, a few
refusals) in a real memory service (SQLite + markdown workspace). `Precedents.check` is timed for a couple that
auto-approves (two exact-tag `memory_list` calls), in process and over /rpc on a loopback port. The reference
documents "~10 ms" for this level.

sup7 rules: `Supervisor.evaluate` over a 12-rule set for approvals that match early, late, and only the
catch-all (escalate, no LLM)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import free_port, save, summary
from flux7.shared.decisions.facts import decision_fact
from flux7.shared.decisions.memory_client import InProcessMemory, MemoryClient, RpcMemory
from flux7.shared.decisions.precedents import EffectiveSettings, PrecedentLedger, Precedents
from flux7.shared.decisions.signing import DecisionSigner
from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.service import MemoryService
from flux7.shared.store.db import Database
from flux7.shared.supervisor.config import parse_config
from flux7.shared.supervisor.loop import Supervisor
from flux7.shared.upstreams.base import Classification, ToolDef

N_DECISIONS = 10_000
COUPLES = 2_500
CHECKS = 300
SIGNER = DecisionSigner(b"bench-signing-key-" + b"0" * 32)  # the facts are signed as a mesh signs them


def populate(service: MemoryService) -> tuple[str, str]:
    """10,000 decisions; returns the (tool, agent) couple that auto-approves."""
    rng = random.Random(7)
    resolvers = ["alice", "bob", "supervisor:l1", "supervisor:mem7", "system:timeout"]
    written = 0
    start = time.perf_counter()
    while written < N_DECISIONS:
        c = written % COUPLES
        tool, agent = f"svc{c % 50}.read_item{c // 50}", f"agent{c % 7}"
        by = resolvers[rng.randrange(len(resolvers))]
        status = "timeout" if by == "system:timeout" else ("denied" if rng.random() < 0.05 else "approved")
        fact = decision_fact(
            approval_id=f"{written:016x}",
            tool=tool,
            agent=agent,
            status=status,
            resolved_by=by,
            reasoning="bench",
            signer=SIGNER,
        )
        text, is_error = service.call_tool("memory_store", fact.arguments(), authenticated=True)
        assert not is_error, text
        written += 1
    print(f"stored {written} decisions in {time.perf_counter() - start:.1f}s", flush=True)
    target = ("svc0.read_target", "agent0")
    for i in range(3):
        fact = decision_fact(
            approval_id=f"t{i}", tool=target[0], agent=target[1], status="approved", resolved_by="alice", signer=SIGNER
        )
        service.call_tool("memory_store", fact.arguments(), authenticated=True)
    return target


async def time_checks(memory: MemoryClient, ledger: PrecedentLedger, tool: str, agent: str) -> dict[str, float]:
    settings = EffectiveSettings(auto_approve=True, min_approvals=3, auto_approve_writes=False)
    # no writer: the by:mem7 write-back goes through the outbox and is not part of the check's latency
    precedents = Precedents(lambda: memory, lambda: settings, ledger)
    tooldef = ToolDef(name=tool, source="mcp", classification=Classification("named", "read"))
    assert await precedents.check(agent, tooldef, {"id": 1}) == "mem7: 3 prior approvals, 0 rejections"
    times: list[float] = []
    for i in range(CHECKS):
        t0 = time.perf_counter()
        reason = await precedents.check(agent, tooldef, {"id": i})
        times.append((time.perf_counter() - t0) * 1000)
        assert reason is not None
    return {k: round(v, 3) for k, v in summary(times).items()}


async def precedents_bench(directory: Path) -> dict[str, Any]:
    db = Database(directory / "mem.db")
    service = MemoryService(MemoryConfig(dir=str(directory / "mem"), hybrid=False, max_entries=N_DECISIONS + 100), db)
    # the check reads the approvals table and resets too (none here: the signatures vouch)
    ledger = PrecedentLedger(SIGNER, db)
    tool, agent = populate(service)
    out: dict[str, Any] = {"stored_decisions": N_DECISIONS + 3, "couples": COUPLES + 1}
    out["in_process_ms"] = await time_checks(InProcessMemory(service), ledger, tool, agent)
    print("precedent check, in process (ms):", out["in_process_ms"], flush=True)

    from granian.constants import Interfaces
    from granian.server.embed import Server

    from flux7.functions.memory import create_memory_app

    port = free_port()
    server = Server(
        create_memory_app(service), address="127.0.0.1", port=port, interface=Interfaces.ASGI, log_enabled=False
    )
    task = asyncio.create_task(server.serve())
    rpc = RpcMemory(f"http://127.0.0.1:{port}")
    try:
        for _ in range(500):
            try:
                await rpc.call_tool("memory_list", {"tags": ["none"]})
                break
            except Exception:
                await asyncio.sleep(0.02)
        out["rpc_loopback_ms"] = await time_checks(rpc, ledger, tool, agent)
        print("precedent check, /rpc on loopback (ms):", out["rpc_loopback_ms"], flush=True)
    finally:
        await rpc.aclose()
        server.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
    return out


async def rules_bench() -> dict[str, Any]:
    rules = [
        {"name": f"r{i}", "condition": f"tool equals svc{i}.write", "action": "deny", "confidence": 0.99}
        for i in range(9)
    ] + [
        {"name": "secrets", "condition": "params.path contains .ssh", "action": "escalate", "confidence": 1.0},
        {"name": "project", "condition": "params.path starts_with project_dir", "action": "approve"},
        {"name": "reads", "condition": "tool contains read", "action": "approve", "confidence": 0.95},
    ]
    cfg = parse_config(
        {"evaluator": {"provider": "none"}, "rules": rules, "project_dirs": ["/home/u/proj"], "decision_log": ""}
    )
    sup = Supervisor(cfg)
    cases = {
        "first_rule": {"id": "a", "tool": "svc0.write", "agent_id": "x", "params": {}},
        "project_dir_rule": {"id": "b", "tool": "fs.write", "agent_id": "x", "params": {"path": "/home/u/proj/a"}},
        "catch_all_escalate": {"id": "c", "tool": "shell.exec", "agent_id": "x", "params": {"cmd": "ls"}},
    }
    out: dict[str, Any] = {"rules": len(cfg.rules)}
    for name, detail in cases.items():
        times: list[float] = []
        for _ in range(20_000):
            t0 = time.perf_counter()
            await sup.evaluate(detail)
            times.append((time.perf_counter() - t0) * 1e6)
        out[f"{name}_us"] = {k: round(v, 2) for k, v in summary(times).items()}
        print(f"sup7 rule decision, {name} (us):", out[f"{name}_us"], flush=True)
    await sup.aclose()
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        precedents = await precedents_bench(Path(tmp))
    rules = await rules_bench()
    path = save("precedents", {"precedent_check": precedents, "sup7_rules": rules})
    print(f"saved {path}")


if __name__ == "__main__":
    asyncio.run(main())
