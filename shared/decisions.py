"""Decisions as facts: every approval resolution and timeout is written to memory (CONTRACT 1.16, newest).

The write is asynchronous and best effort: it never blocks, delays or fails the approval it records. Each fact
says who settled it (`by:human|supervisor|mem7|system`), which is what precedents read back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from .memory_client import MemoryClient

__all__ = [
    "ATTEMPTED",
    "FAILED",
    "SUCCEEDED",
    "DecisionFact",
    "DecisionWriter",
    "ResolverKind",
    "decision_fact",
    "resolver_kind",
]

log = logging.getLogger("flux7.decisions")

# The only metric series of the reference (CONTRACT 1.12).
ATTEMPTED = "agent_mesh_mem7_writes_attempted_total"
SUCCEEDED = "agent_mesh_mem7_writes_succeeded_total"
FAILED = "agent_mesh_mem7_writes_failed_total"

WRITER_AGENT = "flux7-mesh"

ResolverKind = Literal["human", "supervisor", "mem7", "system"]

_VERBS = {"approved": "approved", "denied": "rejected", "timeout": "timed out"}


def resolver_kind(resolved_by: str) -> ResolverKind:
    """How the console classifies a resolver (CONTRACT 1.13 item 4). Anything unrecognised is a human.

    `mcp:<agent>` is an automated supervisor agent using the MCP `approval.resolve` tool: not a human, so it never
    builds a precedent (the tightened rule: only humans' approvals count)."""
    who = resolved_by.strip().lower()
    if who == "supervisor:mem7":
        return "mem7"
    if who.startswith("system:"):
        return "system"
    if who.startswith(("supervisor:", "auto:", "bot:", "mcp:")):
        return "supervisor"
    return "human"


class DecisionFact(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    value: str
    tags: tuple[str, ...]
    agent: str = WRITER_AGENT

    def arguments(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "tags": list(self.tags), "agent": self.agent}


def decision_fact(
    *, approval_id: str, tool: str, agent: str, status: str, resolved_by: str, reasoning: str = ""
) -> DecisionFact:
    """memory_store arguments for one settled approval. ValueError on a status that is not final."""
    verb = _VERBS.get(status)
    if verb is None:
        raise ValueError(f"not a final approval status: {status!r}")
    value = f"{verb} by {resolved_by} — agent:{agent} tool:{tool}"
    reason = " ".join(reasoning.split())  # one line: older readers count decisions line by line
    if reason:
        value += f" reason:{reason}"
    tags = ("decision", status, tool, f"agent:{agent}", f"by:{resolver_kind(resolved_by)}")
    return DecisionFact(key=f"decision.{tool}.{approval_id}", value=value, tags=tags)


class DecisionWriter:
    """Writes decision facts in the background and counts the attempts.

    `memory` and `metrics` are callables so the writer finds components built after it; `memory()` returning
    None means this deployment has no memory, and nothing is attempted (the counters stay at 0)."""

    def __init__(self, memory: Callable[[], MemoryClient | None], metrics: Callable[[], Any] | None = None) -> None:
        self._memory = memory
        self._metrics = metrics or (lambda: None)
        self._lock = threading.Lock()
        self._pending: set[asyncio.Future[Any] | concurrent.futures.Future[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.attempted = 0
        self.succeeded = 0
        self.failed = 0

    # -- entry points (sync, never raise) ------------------------------------------------------------------

    def on_resolved(self, approval: Any) -> None:
        """Approval listener: called after every resolution or timeout, from any thread."""
        try:
            fact = decision_fact(
                approval_id=str(approval.id),
                tool=str(approval.tool),
                agent=str(approval.agent_id),
                status=str(approval.status),
                resolved_by=str(getattr(approval, "resolved_by", "") or ""),
                reasoning=str(getattr(approval, "reasoning", "") or ""),
            )
        except Exception as e:
            log.warning("decision of approval %s not written: %s", getattr(approval, "id", "?"), e)
            return
        self.submit(fact)

    def record_auto_approval(self, agent: str, tool: str, reason: str) -> None:
        """A precedent auto-approval (no approval row exists): tagged by:mem7, so it never counts as one."""
        self.submit(
            decision_fact(
                approval_id=secrets.token_hex(8),
                tool=tool,
                agent=agent,
                status="approved",
                resolved_by="supervisor:mem7",
                reasoning=reason,
            )
        )

    def submit(self, fact: DecisionFact) -> None:
        """Schedule the write without waiting for it."""
        try:
            memory = self._memory()
        except Exception:
            log.exception("memory client unavailable; decision %s not written", fact.key)
            memory = None
        if memory is None:
            return
        coro = self.write(fact, memory)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._track(loop.create_task(coro))
            return
        # Resolved on a thread with no loop (sync handlers, the timeout sweeper): the writer's own loop.
        self._track(asyncio.run_coroutine_threadsafe(coro, self._background_loop()))

    # -- the write ----------------------------------------------------------------------------------------

    async def write(self, fact: DecisionFact, memory: MemoryClient) -> bool:
        self._count(ATTEMPTED)
        try:
            await memory.call_tool("memory_store", fact.arguments())
        except Exception as e:
            self._count(FAILED)
            log.warning("decision %s not written to memory: %s", fact.key, e)
            return False
        self._count(SUCCEEDED)
        return True

    async def drain(self, timeout: float = 5.0) -> bool:
        """Wait for the writes scheduled so far (tests, shutdown). True when all finished in time."""
        with self._lock:
            pending = list(self._pending)
        waiting = [asyncio.wrap_future(f) if isinstance(f, concurrent.futures.Future) else f for f in pending]
        if not waiting:
            return True
        _done, not_done = await asyncio.wait(waiting, timeout=timeout)
        return not not_done

    def _track(self, future: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.add(future)

        def _done(f: Any) -> None:
            with self._lock:
                self._pending.discard(f)

        future.add_done_callback(_done)

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="decision-writer", daemon=True)
                thread.start()
                self._loop = loop
            return self._loop

    def _count(self, name: str) -> None:
        with self._lock:
            if name == ATTEMPTED:
                self.attempted += 1
            elif name == SUCCEEDED:
                self.succeeded += 1
            else:
                self.failed += 1
        try:
            metrics = self._metrics()
            if metrics is not None:
                metrics.inc(name, {})
        except Exception:  # a metrics fault must not turn into a lost decision
            log.exception("metrics increment %s failed", name)
