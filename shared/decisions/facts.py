"""Decisions as facts: every approval resolution and timeout is written to memory (CONTRACT 1.16, newest).

The write never blocks, delays or fails the approval it records. Each fact says who settled it
(`by:human|supervisor|mem7|system`), which approval it settled (`approval:<id>`, also the key's last part) and
which call it decided (`trace:<trace id>`, when the call has one), and carries the mesh's signature (`at:` and
`sig:` tags, see decision_signing.py, covering the trace id too), which is what precedents read back. With a
database, a fact first goes to the outbox in the resolution's own transaction and is delivered from there, in
order, until memory has it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec

from flux7.shared.decisions.memory_client import MemoryClient
from flux7.shared.decisions.outbox import DecisionOutbox
from flux7.shared.decisions.signing import DecisionSigner

__all__ = [
    "ATTEMPTED",
    "FAILED",
    "SUCCEEDED",
    "DecisionFact",
    "DecisionWriter",
    "ResolverKind",
    "SignedDecision",
    "decision_fact",
    "resolver_kind",
    "signed_decision",
]

log = logging.getLogger("flux7.decisions")

# The only metric series of the reference (CONTRACT 1.12).
ATTEMPTED = "agent_mesh_mem7_writes_attempted_total"
SUCCEEDED = "agent_mesh_mem7_writes_succeeded_total"
FAILED = "agent_mesh_mem7_writes_failed_total"

WRITER_AGENT = "flux7-mesh"

ResolverKind = Literal["human", "supervisor", "mem7", "system"]

_VERBS = {"approved": "approved", "denied": "rejected", "timeout": "timed out"}

IDLE_POLL_S = 5.0  # how often an idle deliverer looks for rows another worker left (it died mid-delivery)
BUSY_RETRY_S = 0.2  # another process is delivering: look again shortly, in case it missed the newest rows
FIRST_RETRY_S = 0.5  # after a failed delivery; doubles up to decisions.retry_max_seconds


def resolver_kind(resolved_by: str, note: str = "") -> ResolverKind:
    """How the console classifies a resolver (CONTRACT 1.13 item 4). Anything unrecognised is a human.

    `mcp:<agent>` is an automated supervisor agent using the MCP `approval.resolve` tool: not a human, so it never
    builds a precedent (the tightened rule: only humans' approvals count). `note` is what the resolving request
    said of itself: a human's credential whose request says a machine acted (sup7 holding the admin token) is
    that machine's decision. A note only ever lowers the kind, never raises it."""
    kind = _kind(resolved_by)
    return _kind(note) if kind == "human" and note else kind


def _kind(resolved_by: str) -> ResolverKind:
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
    # What the fact is about (not sent: the key, value and tags say it too); the outbox files rows by them.
    approval_id: str = ""
    tool: str = ""
    subject: str = ""  # the agent whose call was decided

    def arguments(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "tags": list(self.tags), "agent": self.agent}


def decision_fact(
    *,
    approval_id: str,
    tool: str,
    agent: str,
    status: str,
    resolved_by: str,
    note: str = "",
    reasoning: str = "",
    resolved_at: float | None = None,
    signer: DecisionSigner | None = None,
    trace_id: str = "",
) -> DecisionFact:
    """memory_store arguments for one settled approval. ValueError on a status that is not final.

    With a signer, two more tags: `at:<resolution time, epoch ms>` and `sig:<HMAC-SHA256, hex>`."""
    verb = _VERBS.get(status)
    if verb is None:
        raise ValueError(f"not a final approval status: {status!r}")
    value = f"{verb} by {resolved_by} — agent:{agent} tool:{tool}"
    reason = " ".join(reasoning.split())  # one line: older readers count decisions line by line
    if reason:
        value += f" reason:{reason}"
    kind = resolver_kind(resolved_by, note)
    tags: tuple[str, ...] = ("decision", status, tool, f"agent:{agent}", f"by:{kind}", f"approval:{approval_id}")
    if trace_id:
        tags += (f"trace:{trace_id}",)
    if signer is not None:
        at_ms = round((time.time() if resolved_at is None else resolved_at) * 1000)
        mac = signer.mac(
            approval_id=approval_id, tool=tool, agent=agent, status=status, kind=kind, at_ms=at_ms, trace_id=trace_id
        )
        tags += (f"at:{at_ms}", f"sig:{mac}")
    return DecisionFact(
        key=f"decision.{tool}.{approval_id}", value=value, tags=tags, approval_id=approval_id, tool=tool, subject=agent
    )


class SignedDecision(msgspec.Struct, frozen=True):
    """What a fact's signature vouches for, once verified."""

    approval_id: str
    status: str
    kind: str
    at: float  # epoch seconds
    trace_id: str = ""


def signed_decision(
    key: str, tags: Iterable[str], tool: str, agent: str, signer: DecisionSigner
) -> SignedDecision | None:
    """The decision a listed fact of this tool and agent carries, when the mesh's MAC over it verifies."""
    prefix = f"decision.{tool}."
    if not key.startswith(prefix):
        return None
    approval_id = key[len(prefix) :]
    tags = list(tags)
    statuses = [t for t in tags if t in _VERBS]
    kinds = [t[3:] for t in tags if t.startswith("by:")]
    ats = [t[3:] for t in tags if t.startswith("at:")]
    sigs = [t[4:] for t in tags if t.startswith("sig:")]
    traces = [t[6:] for t in tags if t.startswith("trace:")]
    named = [t[9:] for t in tags if t.startswith("approval:")]
    if not approval_id or len(statuses) != 1 or len(kinds) != 1 or len(ats) != 1 or len(sigs) != 1:
        return None  # an ambiguous fact is nobody's signature
    if len(traces) > 1 or any(n != approval_id for n in named):
        return None
    if not ats[0].isdigit():
        return None
    at_ms = int(ats[0])
    trace_id = traces[0] if traces else ""
    if not signer.verify(
        sigs[0],
        approval_id=approval_id,
        tool=tool,
        agent=agent,
        status=statuses[0],
        kind=kinds[0],
        at_ms=at_ms,
        trace_id=trace_id,
    ):
        return None
    return SignedDecision(approval_id, statuses[0], kinds[0], at_ms / 1000, trace_id)


class DecisionWriter:
    """Writes decision facts in the background and counts the attempts.

    `memory` and `metrics` are callables so the writer finds components built after it; `memory()` returning
    None means this deployment has no memory, and nothing is attempted (the counters stay at 0).

    With an `outbox`, facts are durable rows first (`enqueue_resolved` runs inside the resolution's transaction)
    and a deliverer on the writer's own thread sends them in order, retrying with backoff while memory is down.
    Without one (a bare writer), each fact is one best-effort write."""

    def __init__(
        self,
        memory: Callable[[], MemoryClient | None],
        metrics: Callable[[], Any] | None = None,
        *,
        signer: DecisionSigner | None = None,
        outbox: DecisionOutbox | None = None,
        retry_max: float = 30.0,
    ) -> None:
        self._memory = memory
        self._metrics = metrics or (lambda: None)
        self.signer = signer
        self.outbox = outbox
        self._retry_max = max(FIRST_RETRY_S, retry_max)
        self._lock = threading.Lock()
        self._pending: set[asyncio.Future[Any] | concurrent.futures.Future[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.attempted = 0
        self.succeeded = 0
        self.failed = 0
        # the deliverer (outbox mode): woken by kicks, passes counted so drain() can wait for a fresh one
        self._wake: asyncio.Event | None = None
        self._deliverer: concurrent.futures.Future[None] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._stopped = False
        self._passes = threading.Condition()
        self._kicks = 0
        self._passes_done_for = 0  # the kick count the last finished pass had seen when it began
        self.last_error = ""

    # -- entry points (sync, never raise) ------------------------------------------------------------------

    def fact_of(self, approval: Any) -> DecisionFact:
        return decision_fact(
            approval_id=str(approval.id),
            tool=str(approval.tool),
            agent=str(approval.agent_id),
            status=str(approval.status),
            resolved_by=str(getattr(approval, "resolved_by", "") or ""),
            note=str(getattr(approval, "resolved_note", "") or ""),
            reasoning=str(getattr(approval, "reasoning", "") or ""),
            resolved_at=getattr(approval, "resolved_ts", None),
            signer=self.signer,
            trace_id=str(getattr(approval, "trace_id", "") or ""),
        )

    def enqueue_resolved(self, conn: Any, approvals: list[Any]) -> None:
        """Approval transaction hook: the facts of these resolutions join the outbox, committed with them.
        Raises, rolling the resolution back, if they cannot be written: no approval is settled without its fact."""
        if self.outbox is None or not self._has_memory():
            return
        for approval in approvals:
            fact = self.fact_of(approval)
            self.outbox.enqueue(
                conn,
                key=fact.key,
                approval_id=fact.approval_id,
                tool=fact.tool,
                agent=fact.subject,
                arguments=fact.arguments(),
            )

    def on_resolved(self, approval: Any) -> None:
        """Approval listener: called after every resolution or timeout, from any thread."""
        if self.outbox is not None:
            self.kick()  # the fact is already in the outbox (enqueue_resolved)
            return
        try:
            fact = self.fact_of(approval)
        except Exception as e:
            log.warning("decision of approval %s not written: %s", getattr(approval, "id", "?"), e)
            return
        self.submit(fact)

    def record_auto_approval(self, agent: str, tool: str, reason: str, trace_id: str = "") -> None:
        """A precedent auto-approval with no approval row behind it (a bare core: with an approval queue, the
        auto-approval is a settled row and its fact goes through the outbox like any other). Tagged by:mem7, so it
        never counts as a precedent."""
        self.submit(
            decision_fact(
                approval_id=secrets.token_hex(8),
                tool=tool,
                agent=agent,
                status="approved",
                resolved_by="supervisor:mem7",
                reasoning=reason,
                signer=self.signer,
                trace_id=trace_id,
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
        if self.outbox is not None:
            try:
                self.outbox.add(
                    key=fact.key,
                    approval_id=fact.approval_id,
                    tool=fact.tool,
                    agent=fact.subject,
                    arguments=fact.arguments(),
                )
            except Exception:
                log.exception("decision %s not queued for memory", fact.key)
                return
            self.kick()
            return
        coro = self.write(fact.arguments(), memory)
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

    async def write(self, arguments: dict[str, Any], memory: MemoryClient) -> bool:
        key = arguments.get("key", "?")
        self._count(ATTEMPTED)
        try:
            await memory.call_tool("memory_store", arguments)
        except Exception as e:
            self._count(FAILED)
            self.last_error = str(e) or e.__class__.__name__
            log.warning("decision %s not written to memory: %s", key, e)
            return False
        self._count(SUCCEEDED)
        return True

    # -- the outbox's deliverer ----------------------------------------------------------------------------

    def start(self) -> None:
        """Deliver what a previous process left in the outbox (the database says what is owed), then keep on."""
        self.kick()

    def kick(self) -> None:
        """Ask the deliverer for a pass now; starts it on first use. Never raises, never blocks."""
        if self.outbox is None or self._stopped or not self._has_memory():
            return  # no memory at all: nothing is queued, nothing to deliver
        try:
            loop = self._background_loop()
            with self._passes:
                self._kicks += 1
            with self._lock:  # one deliverer per writer: its passes never overlap, so neither do its sends
                if self._deliverer is None or self._deliverer.done():
                    self._deliverer = asyncio.run_coroutine_threadsafe(self._deliver_forever(), loop)
            loop.call_soon_threadsafe(self._set_wake)
        except Exception:
            log.exception("decision deliverer could not be woken")

    def _set_wake(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()

    async def _deliver_forever(self) -> None:
        self._task = asyncio.current_task()
        if self._wake is None:
            self._wake = asyncio.Event()
        failures = 0
        while True:
            self._wake.clear()
            with self._passes:
                seen = self._kicks
            try:
                outcome = await self._deliver_pass()
            except Exception as e:  # a database fault: the rows stay, try again later
                log.exception("decision outbox pass failed")
                self.last_error = str(e)
                outcome = False
            with self._passes:
                self._passes_done_for = max(self._passes_done_for, seen)
                self._passes.notify_all()
            if outcome is None:
                wait = BUSY_RETRY_S
            elif outcome:
                failures, wait = 0, IDLE_POLL_S
            else:
                failures += 1
                wait = min(self._retry_max, FIRST_RETRY_S * 2 ** min(failures - 1, 16))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _deliver_pass(self) -> bool | None:
        """Send the outbox in order until it is empty (True), memory fails (False) or another process delivers
        (None). A row leaves the outbox only after memory acknowledged it."""
        assert self.outbox is not None
        memory = self._memory()
        if memory is None:
            return True
        if not self.outbox.head(1):
            return True
        with self.outbox.delivering() as mine:
            if not mine:
                return None
            while rows := self.outbox.head(50):
                for row in rows:
                    if not await self.write(row.arguments, memory):
                        self.outbox.failed(row.seq, self.last_error)
                        return False  # stop here: a later fact never overtakes an earlier one
                    self.outbox.delivered(row.seq)
        return True

    async def drain(self, timeout: float = 5.0) -> bool:
        """Wait for the writes scheduled so far (tests, shutdown). True when all finished in time.

        In outbox mode: until a delivery pass that began after this call has ended (delivered everything, or
        met a memory that is down: the rows wait in the outbox)."""
        if self.outbox is not None:
            if self._deliverer is None:
                return True
            with self._passes:
                target = self._kicks + 1
            self.kick()
            return await asyncio.to_thread(self._wait_pass, target, timeout)
        with self._lock:
            pending = list(self._pending)
        waiting = [asyncio.wrap_future(f) if isinstance(f, concurrent.futures.Future) else f for f in pending]
        if not waiting:
            return True
        _done, not_done = await asyncio.wait(waiting, timeout=timeout)
        return not not_done

    def _wait_pass(self, target: int, timeout: float) -> bool:
        with self._passes:
            return self._passes.wait_for(lambda: self._passes_done_for >= target, timeout)

    async def stop(self, timeout: float = 5.0) -> None:
        """Finish the pass under way (up to `timeout`), then stop the writer's thread; what is left stays queued."""
        await self.drain(timeout)
        with self._lock:
            self._stopped = True  # a late kick must not start a thread nobody stops: the database keeps its rows
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None:
            with contextlib.suppress(Exception):
                ended = asyncio.run_coroutine_threadsafe(self._wind_down(), loop)
                await asyncio.wait_for(asyncio.wrap_future(ended), timeout)
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                await asyncio.to_thread(thread.join, timeout)
                if not thread.is_alive():
                    loop.close()
        self._deliverer = None
        if self.outbox is not None:
            self.outbox.close()

    async def _wind_down(self) -> None:
        """On the writer's loop: end the deliverer (a row it was sending stays queued) and the loop's client."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):
            memory = self._memory()
            if memory is not None:
                await memory.aclose()

    def _has_memory(self) -> bool:
        try:
            return self._memory() is not None
        except Exception:
            return True  # a memory that cannot be built yet: keep the fact, it is delivered when it can be

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
                self._loop, self._thread = loop, thread
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
