"""`flux7 agent`'s own overhead (target: under 5 ms p50 each, on loopback):

1. per turn: the first token through the agent (`Agent.run`, with its built-in tools offered and a session saved
   after each message) vs straight from the same fake streaming provider (`chat.stream`), side by side;
2. per governed built-in call: the mesh's `/decide` round trip, and `/decide` plus the outcome report, against a
   real `flux7 serve` (1 worker, policy allow, traces written durably);
3. a whole governed `read_file` call through the agent's two gates (validation, hooks none, the local safety
   layer with this machine's hidden paths, the permission rules, the asked-call marker written before `/decide`
   and removed after the report, `/decide`, the read, the report), measured from the call's start event to its
   end event; and the same for an `edit_file` call, which also computes its diff first, sends it as `/decide`'s
   preview and saves a checkpoint of the file;
4. the local safety layer alone, per call: a `read_file` and a `shell` command (parsed with bashlex);
5. the sandbox's start, per shell command (not per built-in call): `/bin/sh -c true` bare and through bwrap.

The provider is the streaming fake of the tests (tests/agent/llm_stream_servers.py) on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import save, summary  # noqa: E402
from bench.rest_overhead_bench import start_mesh, stop  # noqa: E402
from flux7.shared.agent import safety  # noqa: E402
from flux7.shared.agent.agent import Agent, Workspace  # noqa: E402
from flux7.shared.agent.asked import AskedCalls  # noqa: E402
from flux7.shared.agent.builtin_tools import ToolContext  # noqa: E402
from flux7.shared.agent.conversation import Message  # noqa: E402
from flux7.shared.agent.llm import TextDelta, make_chat  # noqa: E402
from flux7.shared.agent.mesh_tools import MeshTools  # noqa: E402
from flux7.shared.agent.permissions import Permissions  # noqa: E402
from flux7.shared.agent.sandbox import Sandbox, find_bwrap, hidden_paths  # noqa: E402
from flux7.shared.agent.sessions import Session, SessionStore  # noqa: E402
from tests.agent.llm_stream_servers import last_tool_results, openai_stream  # noqa: E402

POLICY = 'name: bench\nagent: "*"\nrules:\n  - tools: ["*"]\n    action: allow\n'


def script(body: dict[str, Any]) -> list[tuple[str, ...]]:
    prompt = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if prompt == "read" and not last_tool_results(body):
        return [("tool", "read_file", json.dumps({"path": "notes.txt"}))]
    if prompt == "edit" and not last_tool_results(body):
        return [
            (
                "tool",
                "edit_file",
                json.dumps({"path": "notes.txt", "old_text": "t", "new_text": "t", "replace_all": True}),
            )
        ]
    return [("text", "Hello there, this is the answer.")]


async def first_token_direct(url: str, n: int) -> list[float]:
    chat = make_chat("openai", "fake", url=url, api_key="sk-test")
    out: list[float] = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            async for piece in chat.stream("be brief", [Message("user", "hi")], []):
                if isinstance(piece, TextDelta):
                    out.append((time.perf_counter() - t0) * 1000)
                    break
    finally:
        await chat.aclose()
    return out


async def first_token_agent(url: str, mesh_url: str, work: Path, n: int) -> list[float]:
    chat = make_chat("openai", "fake", url=url, api_key="sk-test")
    mesh = MeshTools(mesh_url, "bench-agent", session_id="bench-turns")
    store = SessionStore(work / "sessions")
    out: list[float] = []
    try:
        for _ in range(n):
            agent = Agent(
                chat,
                mesh,
                workspace=Workspace(work, work, mode="auto"),
                store=store,
                session=Session("s", str(work)),
                permissions=Permissions([], work, work / "agent.toml"),
                asked=AskedCalls(work / "sessions" / "asked", mesh_url),
            )
            agent.tools = []  # listed once per session in real use, not per turn
            t0 = time.perf_counter()
            async for event in agent.run("hi"):
                if event.type == "text_delta":
                    out.append((time.perf_counter() - t0) * 1000)
                    break
    finally:
        await chat.aclose()
        await mesh.aclose()
    return out


async def decide_round_trips(mesh_url: str, n: int) -> tuple[list[float], list[float]]:
    mesh = MeshTools(mesh_url, "bench-agent", session_id="bench-decide")
    decide: list[float] = []
    both: list[float] = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            decision = await mesh.decide("read_file", {"path": "notes.txt"})
            t1 = time.perf_counter()
            await mesh.report(decision.trace_id, ok=True, exit_code=None, size=10, duration_ms=0.1, error="")
            t2 = time.perf_counter()
            decide.append((t1 - t0) * 1000)
            both.append((t2 - t0) * 1000)
    finally:
        await mesh.aclose()
    return decide, both


def workspace(work: Path) -> Workspace:
    """The agent's workspace as `flux7 agent` builds it: this machine's hidden paths, the sandbox."""
    home = Path(os.environ.get("HOME") or Path.home())
    hidden, _ = hidden_paths(home, work, os.environ)
    return Workspace(work, home, mode="auto", tools=ToolContext(hidden=hidden), sandbox=Sandbox(find_bwrap(), hidden))


async def governed_calls(url: str, mesh_url: str, work: Path, n: int, prompt: str = "read") -> list[float]:
    """A run with one read_file (or edit_file) call, timed from the call's start event to its end event, with the
    agent built as `flux7 agent` builds it (a session saved, permission rules, asked-call markers)."""
    chat = make_chat("openai", "fake", url=url, api_key="sk-test")
    mesh = MeshTools(mesh_url, "bench-agent", session_id="bench-calls")
    store = SessionStore(work / "sessions")
    out: list[float] = []
    try:
        for _ in range(n):
            agent = Agent(
                chat,
                mesh,
                workspace=workspace(work),
                store=store,
                session=Session("calls", str(work)),
                permissions=Permissions([], work, work / "agent.toml"),
                asked=AskedCalls(work / "sessions" / "asked", mesh_url),
            )
            agent.tools = []
            started = done = 0.0
            async for event in agent.run(prompt):
                if event.type == "tool_call_start":
                    started = time.perf_counter()
                elif event.type == "tool_call_complete":
                    done = time.perf_counter()
                    assert event.policy == "allow", event.text
            out.append((done - started) * 1000)
    finally:
        await chat.aclose()
        await mesh.aclose()
    return out


def local_gate(work: Path, n: int) -> tuple[list[float], list[float]]:
    """The local safety layer's verdict alone (milliseconds): a read_file, and a shell command it parses."""
    ws = workspace(work)
    timed: tuple[list[float], list[float]] = ([], [])
    calls = [
        ("read_file", {"path": "notes.txt"}, False),
        ("shell", {"command": "git log --oneline -5 | head -3 && cat notes.txt"}, True),
    ]
    for _ in range(n):
        for out, (tool, args, mutating) in zip(timed, calls, strict=True):
            t0 = time.perf_counter()
            safety.check(
                tool,
                args,
                mutating=mutating,
                mode="auto",
                cwd=work,
                home=ws.home,
                hidden=ws.tools.hidden,
                env=os.environ,
                sandboxed=True,
            )
            out.append((time.perf_counter() - t0) * 1000)
    return timed


async def sandbox_start(work: Path, n: int) -> tuple[list[float], list[float]]:
    """`/bin/sh -c true`, bare and in the sandbox (milliseconds, process start to exit)."""
    ws = workspace(work)
    assert ws.sandbox is not None and not await ws.sandbox.probe(), "the sandbox does not start here"
    bare: list[float] = []
    boxed: list[float] = []
    command = ["/bin/sh", "-c", "true"]
    for _ in range(n):
        for out, argv in (
            (bare, command),
            (boxed, ws.sandbox.argv(command, root=work, where=work, writable=True, network=False)),
        ):
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(*argv, cwd=work)
            await proc.wait()
            out.append((time.perf_counter() - t0) * 1000)
    return bare, boxed


async def run(mesh_url: str, work: Path, n: int) -> dict[str, Any]:
    with openai_stream(script) as llm:
        await first_token_direct(llm.url, 20)  # warm both paths
        await first_token_agent(llm.url, mesh_url, work, 20)
        direct: list[float] = []
        through: list[float] = []
        for _ in range(n // 10):  # interleaved, so both see the same load on a shared machine
            direct += await first_token_direct(llm.url, 10)
            through += await first_token_agent(llm.url, mesh_url, work, 10)
        decide, both = await decide_round_trips(mesh_url, n)
        calls = await governed_calls(llm.url, mesh_url, work, max(20, n // 4))
        edits = await governed_calls(llm.url, mesh_url, work, max(20, n // 4), "edit")
    gate_read, gate_shell = local_gate(work, n)
    bare, boxed = await sandbox_start(work, max(20, n // 4))
    d, a = summary(direct), summary(through)
    return {
        "first_token_direct_ms": d,
        "first_token_agent_ms": a,
        "turn_overhead_p50_ms": a["p50"] - d["p50"],
        "decide_ms": summary(decide),
        "decide_and_report_ms": summary(both),
        "governed_read_file_call_ms": summary(calls),
        "governed_edit_file_call_ms": summary(edits),
        "local_gate_read_file_ms": summary(gate_read),
        "local_gate_shell_ms": summary(gate_shell),
        "shell_bare_start_ms": summary(bare),
        "shell_sandboxed_start_ms": summary(boxed),
        "sandbox_start_overhead_p50_ms": summary(boxed)["p50"] - summary(bare)["p50"],
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    tmp = Path(tempfile.mkdtemp(prefix="flux7-agent-bench-"))
    (tmp / "policies").mkdir()
    (tmp / "policies" / "bench.yaml").write_text(POLICY)
    (tmp / "config.yaml").write_text(
        f"storage_path: {tmp}/flux7.db\npolicy_dir: {tmp}/policies\nmemory: {{enabled: false}}\n"
    )
    work = tmp / "work"
    work.mkdir()
    (work / "notes.txt").write_text("ten bytes\n")
    proc, port = start_mesh(tmp / "config.yaml", 1)
    try:
        results = asyncio.run(run(f"http://127.0.0.1:{port}", work, n))
    finally:
        stop(proc)
    r = results
    print(
        f"first token: direct p50 {r['first_token_direct_ms']['p50']:.2f} ms, through the agent p50 "
        f"{r['first_token_agent_ms']['p50']:.2f} ms: overhead {r['turn_overhead_p50_ms']:.2f} ms per turn"
    )
    print(
        f"/decide p50 {r['decide_ms']['p50']:.2f} ms (p95 {r['decide_ms']['p95']:.2f}); /decide + outcome p50 "
        f"{r['decide_and_report_ms']['p50']:.2f} ms; a whole governed read_file call p50 "
        f"{r['governed_read_file_call_ms']['p50']:.2f} ms, edit_file (diff, preview, checkpoint) p50 "
        f"{r['governed_edit_file_call_ms']['p50']:.2f} ms"
    )
    print(
        f"local gate: read_file p50 {r['local_gate_read_file_ms']['p50']:.3f} ms, a parsed shell command p50 "
        f"{r['local_gate_shell_ms']['p50']:.3f} ms; a shell command's start: bare p50 "
        f"{r['shell_bare_start_ms']['p50']:.2f} ms, sandboxed p50 {r['shell_sandboxed_start_ms']['p50']:.2f} ms "
        f"(+{r['sandbox_start_overhead_p50_ms']:.2f} ms per command)"
    )
    path = save("agent", {"unit": "milliseconds", "iterations": n, **results, "target_p50_ms": 5})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
