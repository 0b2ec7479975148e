"""The sup7 loop: poll pending approvals, decide with rules then an LLM, resolve or escalate (CONTRACT 1.13).

Escalating means leaving the approval pending for a human; an escalated id is not evaluated again. Every
decision goes to the JSONL decision log, to the admin API's recent list, and to memory when enabled.

Each pending approval is evaluated in its own task, so one that waits (a slow LLM, or the Claude Code callback
waiting up to `callback_timeout` for a verdict) never holds up the others: the loop keeps polling, and an id being
evaluated is skipped until its evaluation ends."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import OrderedDict, deque
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import msgspec

from flux7.shared import __version__
from flux7.shared.decisions.memory_client import MemoryClient, RpcMemory
from flux7.shared.supervisor.callback import VerdictDesk
from flux7.shared.supervisor.config import Sup7Config
from flux7.shared.supervisor.mesh_api import MeshApi, MeshUnavailable
from flux7.shared.supervisor.providers import ProviderChain
from flux7.shared.supervisor.rules import RuleEngine

__all__ = ["Decision", "Supervisor"]

log = logging.getLogger("flux7.sup7")

_SEEN_CAP = 10_000
_PAST = {"approve": "approved", "deny": "denied", "escalate": "escalated"}


class Decision(msgspec.Struct, kw_only=True):
    """One line of the decision log (CONTRACT 3)."""

    timestamp: str
    approval_id: str
    agent_id: str
    tool: str
    decision: str  # approved | denied | escalated
    rule_matched: str | None
    reasoning: str
    confidence: float
    evaluation_ms: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Supervisor:
    def __init__(
        self,
        config: Sup7Config,
        *,
        mesh: MeshApi | None = None,
        memory: MemoryClient | None = None,
    ) -> None:
        self.config = config
        self.mesh = mesh or MeshApi(
            config.mesh.url,
            config.mesh.agent_id,
            token=config.mesh.token,
            admin_token=config.mesh.admin_token,
            timeout=config.mesh.timeout,
        )
        if memory is None and config.memory.enabled:
            memory = RpcMemory(config.memory.url, config.memory.token)
        self.memory = memory
        self.rules = RuleEngine(config.rules, config.project_dirs)
        ev = config.evaluator
        # Where claude-code evaluations wait for a verdict; sup7's MCP server (mcp_server.py) reads and answers it.
        self.desk = VerdictDesk(ev.callback_timeout, ev.confidence_threshold)
        self.llm = ProviderChain(
            ev.providers(),
            ev.system_prompt,
            failures=ev.breaker_failures,
            cooldown=ev.breaker_cooldown,
            desk=self.desk,
        )
        self.resolved_by = f"supervisor:{config.mesh.agent_id}"
        self.paused = False
        self.polls = 0  # rounds of the loop, paused or not
        self.mesh_reachable = False
        self.started_at = time.time()
        self.counts = {"approved": 0, "denied": 0, "escalated": 0}
        self.last_at: str | None = None
        self.recent: deque[Decision] = deque(maxlen=max(1, config.admin.recent_decisions))
        self._escalated: OrderedDict[str, None] = OrderedDict()
        self._in_flight: set[str] = set()
        self._tasks: dict[str, asyncio.Task[Decision | None]] = {}
        self._listed: set[str] | None = None  # every id the last round listed; None when a scope failed
        # Bounds the requests to the mesh in flight at once; evaluations themselves run unbounded (see ProviderChain).
        self._semaphore = asyncio.Semaphore(10)
        self._log_file: IO[str] | None = None
        self.stopping = asyncio.Event()

    # -- lifecycle ----------------------------------------------------------------------------------------

    def open_log(self) -> None:
        if self.config.decision_log and self._log_file is None:
            path = Path(self.config.decision_log).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = path.open("a", encoding="utf-8")

    async def run(self) -> None:
        """Until `stopping` is set: wait for the mesh, recall memory once, then poll every interval."""
        self.open_log()
        interval = self.config.poll.interval
        while not self.stopping.is_set() and not await self.mesh.is_healthy():
            log.info("waiting for the mesh at %s", self.mesh.url)
            await self._sleep(interval)
        self.mesh_reachable = not self.stopping.is_set()
        await self.recall()
        try:
            while not self.stopping.is_set():
                if not self.paused:
                    try:
                        await self.dispatch_once()
                    except Exception:
                        log.exception("unexpected error in the poll loop")
                self.polls += 1
                await self._sleep(interval)
        finally:
            # Evaluations still running (a callback waiting for a verdict) are dropped: their approvals stay pending.
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def aclose(self) -> None:
        await self.llm.aclose()
        await self.mesh.aclose()
        if self.memory is not None:
            await self.memory.aclose()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    async def recall(self) -> None:
        mem = self.config.memory
        if self.memory is None or not mem.recall_on_start:
            return
        try:
            text = await self.memory.call_tool(
                "memory_recall",
                {"tags": list(mem.tags), "agent": self.config.mesh.agent_id, "limit": mem.recall_limit},
            )
            log.info("recalled past decisions from memory: %s", text.splitlines()[0] if text else "none")
        except Exception as e:
            log.warning("memory recall failed: %s", e)

    # -- one poll -----------------------------------------------------------------------------------------

    async def pending_ids(self) -> list[dict[str, Any]]:
        """Pending approvals over every tool scope, each id once, minus escalated and in-flight ones."""
        seen: set[str] = set()
        listed: set[str] | None = set()
        out: list[dict[str, Any]] = []
        for scope in self.config.poll.tool_scopes or (None,):
            try:
                items = await self.mesh.pending(scope)
            except MeshUnavailable as e:
                if self.mesh_reachable:
                    log.warning("mesh connection lost: %s", e)
                self.mesh_reachable = False
                listed = None
                continue
            if not self.mesh_reachable:
                log.info("mesh reachable")
            self.mesh_reachable = True
            for item in items:
                aid = str(item.get("id", ""))
                if listed is not None:
                    listed.add(aid)
                if aid and aid not in seen and aid not in self._escalated and aid not in self._in_flight:
                    seen.add(aid)
                    out.append(item)
        self._listed = listed
        return out

    async def poll_once(self) -> list[Decision]:
        """One round, waiting for every evaluation it starts (tests and one-shot use)."""
        pending = await self.pending_ids()
        results = await asyncio.gather(*(self._process(item) for item in pending))
        return [d for d in results if d is not None]

    async def dispatch_once(self) -> int:
        """One round of the running loop: start an evaluation task per new pending approval, wait for none."""
        pending = await self.pending_ids()
        self._withdraw_settled()
        for item in pending:
            aid = str(item["id"])
            self._in_flight.add(aid)  # before the task runs, so the next round skips it
            task = asyncio.create_task(self._process(item))
            self._tasks[aid] = task
            task.add_done_callback(functools.partial(self._task_done, aid))
        return len(pending)

    def _task_done(self, aid: str, _task: asyncio.Task[Decision | None]) -> None:
        self._tasks.pop(aid, None)

    def _withdraw_settled(self) -> None:
        """A callback evaluation whose approval is no longer pending (a human settled it, or it timed out in the
        mesh) stops waiting: it leaves sup7_pending and nothing is decided or logged for it."""
        if self._listed is None:
            return
        for aid in self.desk.ids():
            task = self._tasks.get(aid)
            if aid not in self._listed and task is not None:
                log.info("%s was settled elsewhere while waiting for a verdict", aid)
                task.cancel()

    async def _process(self, summary: dict[str, Any]) -> Decision | None:
        aid = str(summary["id"])
        self._in_flight.add(aid)
        try:
            async with self._semaphore:
                try:
                    detail = await self.mesh.approval_detail(aid)
                except MeshUnavailable as e:
                    log.warning("no detail for %s: %s", aid, e)
                    return None
            if detail.get("status", "pending") != "pending":
                return None
            decision = await self.evaluate(detail)
            if decision.decision in ("approved", "denied"):
                action = "approve" if decision.decision == "approved" else "deny"
                try:
                    async with self._semaphore:
                        status = await self.mesh.resolve(
                            aid,
                            action,
                            resolved_by=self.resolved_by,
                            reasoning=decision.reasoning,
                            confidence=decision.confidence,
                        )
                except MeshUnavailable as e:
                    log.warning("could not resolve %s: %s", aid, e)
                    return None
                if status != 200:
                    log.info("%s not resolved (HTTP %s): someone else settled it first", aid, status)
                    return None
            else:
                self._remember_escalated(aid)
            log.info("%s %s (%s): %s", decision.decision, aid, decision.tool, decision.reasoning)
            await self._record(decision)
            return decision
        except Exception:
            log.exception("evaluating %s failed; it stays pending", aid)
            return None
        finally:
            self._in_flight.discard(aid)

    def _remember_escalated(self, aid: str) -> None:
        self._escalated[aid] = None
        while len(self._escalated) > _SEEN_CAP:
            self._escalated.popitem(last=False)

    # -- deciding -----------------------------------------------------------------------------------------

    async def evaluate(self, detail: dict[str, Any]) -> Decision:
        """Rules first (first match wins), the LLM for what only the catch-all matched; escalate on doubt."""
        start = time.perf_counter()
        threshold = self.config.evaluator.confidence_threshold

        def made(decision: str, rule: str | None, reasoning: str, confidence: float) -> Decision:
            return Decision(
                timestamp=_now(),
                approval_id=str(detail.get("id", "")),
                agent_id=str(detail.get("agent_id", "")),
                tool=str(detail.get("tool", "")),
                decision=decision,
                rule_matched=rule,
                reasoning=reasoning,
                confidence=confidence,
                evaluation_ms=int((time.perf_counter() - start) * 1000),
            )

        match = self.rules.evaluate(detail)
        # A call whose arguments try to steer the reviewer: rules may deny or escalate it (`injection_risk ==
        # true`), never approve it, and the LLM never sees it; by default it goes to a human.
        if detail.get("injection_risk"):
            if match is None or (match.catch_all and match.action == "escalate"):
                return made("escalated", "injection-risk", "injection risk detected by flux7-mesh", 1.0)
            if match.action == "approve":
                log.warning(
                    "rule %r would approve %s, but it is flagged for injection: escalating",
                    match.rule,
                    detail.get("id", ""),
                )
                reasoning = f"rule '{match.rule}' would approve, but injection risk detected by flux7-mesh"
                return made("escalated", match.rule, reasoning, match.confidence)
            # deny, or a rule's own escalate: decided below like any other rule match
        if match is None:
            return made("escalated", None, "no rule matched", 0.0)
        if match.catch_all and match.action == "escalate" and self.llm:
            verdict, failures = await self.llm.evaluate_explained({**detail, "rule_trail": self.rules.trail(detail)})
            if verdict is None:
                reasoning = "LLM evaluation failed, escalating to human" + (f" ({failures})" if failures else "")
                return made("escalated", "llm-fallback", reasoning, 0.0)
            decision = _PAST.get(verdict.action, "escalated")
            reasoning = verdict.reasoning
            if decision != "escalated" and verdict.confidence < threshold:
                reasoning = f"LLM confidence {verdict.confidence:.2f} below threshold {threshold}: {reasoning}"
                decision = "escalated"
            return made(decision, verdict.source or "llm", reasoning, verdict.confidence)
        decision = _PAST[match.action]
        reasoning = match.reasoning
        if decision != "escalated" and match.confidence < threshold:
            reasoning = f"{reasoning}; confidence {match.confidence:.2f} below threshold {threshold}"
            decision = "escalated"
        return made(decision, match.rule, reasoning, match.confidence)

    # -- recording ----------------------------------------------------------------------------------------

    async def _record(self, d: Decision) -> None:
        self.counts[d.decision] = self.counts.get(d.decision, 0) + 1
        self.last_at = d.timestamp
        self.recent.appendleft(d)
        if self._log_file is not None:
            try:
                self._log_file.write(msgspec.json.encode(d).decode() + "\n")
                self._log_file.flush()
            except OSError as e:
                log.warning("decision log write failed: %s", e)
        mem = self.config.memory
        if self.memory is not None and mem.store_decisions:
            value = json.dumps(
                {
                    "approval_id": d.approval_id,
                    "agent_id": d.agent_id,
                    "tool": d.tool,
                    "decision": d.decision,
                    "rule_matched": d.rule_matched,
                    "reasoning": d.reasoning,
                    "confidence": d.confidence,
                    "timestamp": d.timestamp,
                }
            )
            tags = [*mem.tags, d.decision, d.tool.split(".")[0]]
            try:
                await self.memory.call_tool(
                    "memory_store",
                    {
                        "key": f"supervisor:decision:{d.approval_id}",
                        "value": value,
                        "tags": tags,
                        "agent": self.config.mesh.agent_id,
                    },
                )
            except Exception as e:  # memory is a record, never a condition of deciding
                log.warning("decision %s not stored in memory: %s", d.approval_id, e)

    # -- the admin API's view -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "state": "paused" if self.paused else "running",
            "uptime_s": round(time.time() - self.started_at),
            "mesh": {"url": self.config.mesh.url, "reachable": self.mesh_reachable},
            "memory": {"enabled": self.memory is not None},
            "evaluator": {"mode": self.llm.mode, "providers": self.llm.status()},
            "decisions": {**self.counts, "last_at": self.last_at},
        }

    def config_summary(self) -> dict[str, Any]:
        """Rules, thresholds and providers; never a token or key."""
        ev = self.config.evaluator
        return {
            "rules": [
                {"name": r.name, "condition": r.condition, "action": r.action, "confidence": r.confidence}
                for r in self.config.rules
            ],
            "evaluator": {
                "confidence_threshold": ev.confidence_threshold,
                "breaker_failures": ev.breaker_failures,
                "breaker_cooldown_s": ev.breaker_cooldown,
                "providers": self.llm.describe(),
            },
            "poll_interval_s": self.config.poll.interval,
            "tool_scopes": list(self.config.poll.tool_scopes),
            "project_dirs": list(self.config.project_dirs),
        }

    def recent_decisions(self, limit: int) -> list[dict[str, Any]]:
        return [msgspec.to_builtins(d) for d in list(self.recent)[:limit]]

    def pause(self) -> None:
        if not self.paused:
            log.info("paused: approvals stay pending for a human")
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            log.info("resumed")
        self.paused = False
