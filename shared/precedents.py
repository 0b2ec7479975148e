"""Precedents from memory, level 1 of the approval flow (CONTRACT 1.16 newest, DESIGN decision 7).

A call that needs approval passes at once when humans approved this very tool for this very agent at least
`min_approvals` times and nobody ever refused it. Only tools that read qualify unless `auto_approve_writes`.
Facts are read with `memory_list` on exact tags, never a semantic search. Anything unexpected - memory down,
slow (3 s), an unreadable answer, injection markers in the arguments - escalates: auto-approval only adds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .decisions import WRITER_AGENT, DecisionWriter
from .errors import BadRequest, Conflict
from .guard import injection_risk
from .memory.workspace import go_trim
from .memory_client import ListedMemory, MemoryClient, MemoryUnavailable, parse_memory_list

__all__ = ["EffectiveSettings", "Precedents", "approval_reason", "tool_is_eligible", "wire_precedents"]

log = logging.getLogger("flux7.precedents")

CHECK_TIMEOUT_S = 3.0
_STATUSES = ("approved", "denied", "timeout")


@dataclass(frozen=True)
class EffectiveSettings:
    auto_approve: bool
    min_approvals: int
    auto_approve_writes: bool


def approval_reason(n: int) -> str:
    return f"mem7: {n} prior approvals, 0 rejections"


def tool_is_eligible(tool: Any, auto_approve_writes: bool) -> bool:
    """Only a named tool whose declared metadata says it reads; writes, generic and unknown tools go on."""
    if tool is None:
        return False
    if auto_approve_writes:
        return True
    c = tool.classification
    return c.access == "read" and c.family == "named"


def _approved_tags(tool: str, agent: str) -> list[str]:
    return ["decision", "approved", "by:human", tool, f"agent:{agent}"]


def _refusal_tags(tool: str, agent: str) -> list[str]:
    return ["decision", "denied", tool, f"agent:{agent}"]


class Precedents:
    """`check` is what the pipeline calls at step 6; `table` and `forget` serve the control plane."""

    def __init__(
        self,
        memory: Callable[[], MemoryClient | None],
        settings: Callable[[], EffectiveSettings],
        writer: DecisionWriter | None = None,
        lookup: Callable[[str], Any] | None = None,
        *,
        timeout: float = CHECK_TIMEOUT_S,
    ) -> None:
        self._memory = memory
        self._settings = settings
        self._writer = writer
        self._lookup = lookup or (lambda _name: None)
        self.timeout = timeout

    # -- level 1 --------------------------------------------------------------------------------------

    async def check(self, agent: str, tool: Any, arguments: Any) -> str | None:
        """The auto-approval reason, or None to go on to the approval queue. Never raises."""
        try:
            settings = self._settings()
            if not settings.auto_approve or not tool_is_eligible(tool, settings.auto_approve_writes):
                return None
            if injection_risk(arguments):
                log.warning(
                    "injection risk detected, forcing human review: agent=%s tool=%s (precedents skipped)",
                    agent,
                    tool.name,
                )
                return None
            memory = self._memory()
            if memory is None:
                return None
            approvals = await asyncio.wait_for(self._count(memory, tool.name, agent), self.timeout)
        except TimeoutError:
            log.warning(
                "memory slower than %.1fs: precedents for %s escalate",
                self.timeout,
                getattr(tool, "name", "?"),
            )
            return None
        except Exception as e:
            log.warning("precedents for %s escalate: %s", getattr(tool, "name", "?"), e)
            return None
        if approvals is None or approvals < max(1, settings.min_approvals):
            return None
        reason = approval_reason(approvals)
        if self._writer is not None:
            self._writer.record_auto_approval(agent, tool.name, reason)
        return reason

    async def _count(self, memory: MemoryClient, tool: str, agent: str) -> int | None:
        """Human approvals of this couple, or None when any refusal exists. Raises on unreadable answers."""
        approved_text, refused_text = await asyncio.gather(
            memory.call_tool("memory_list", {"tags": _approved_tags(tool, agent)}),
            memory.call_tool("memory_list", {"tags": _refusal_tags(tool, agent)}),
        )
        refused = parse_memory_list(refused_text)
        if refused:
            return None
        required = set(_approved_tags(tool, agent))
        # The tags were the query; checking them again costs nothing and guards a memory that matched loosely.
        return sum(1 for m in parse_memory_list(approved_text) if required <= set(m.tags))

    # -- the control plane -----------------------------------------------------------------------------

    def disabled_reason(self) -> str:
        if not self._settings().auto_approve:
            return "auto-approve is off (supervisor.auto_approve)"
        if self._memory() is None:
            return "no memory: set memory.url or run the memory role in this process"
        return ""

    async def table(self) -> dict[str, Any]:
        """GET /approvals/precedents: every tool + agent couple memory holds decisions for."""
        reason = self.disabled_reason()
        if reason:
            return {"enabled": False, "reason": reason, "precedents": []}
        settings = self._settings()
        memory = self._memory()
        assert memory is not None
        try:
            text = await asyncio.wait_for(
                memory.call_tool("memory_list", {"tags": ["decision"]}), max(self.timeout, 10.0)
            )
            facts = parse_memory_list(text)
        except TimeoutError:
            raise MemoryUnavailable("memory did not answer in time") from None
        except ValueError as e:
            raise MemoryUnavailable(f"memory answered an unreadable list: {e}") from None
        couples: dict[tuple[str, str], dict[str, Any]] = {}
        for fact in facts:
            couple = _couple_of(fact)
            if couple is None:
                continue
            row = couples.setdefault(
                couple,
                {
                    "tool": couple[0],
                    "agent": couple[1],
                    "human_approved": 0,
                    "other_approved": 0,
                    "refused": 0,
                    "untagged": 0,
                    "last": "",
                },
            )
            tags = set(fact.tags)
            by = next((t[3:] for t in fact.tags if t.startswith("by:")), "")
            if not by:
                row["untagged"] += 1
            if "denied" in tags:
                row["refused"] += 1  # a refusal blocks whoever made it, tagged or not
            elif "approved" in tags and by:
                row["human_approved" if by == "human" else "other_approved"] += 1
            row["last"] = max(row["last"], fact.updated)
        rows: list[dict[str, Any]] = []
        minimum = max(1, settings.min_approvals)
        for (tool_name, _agent), row in sorted(couples.items()):
            eligible = tool_is_eligible(self._lookup(tool_name), settings.auto_approve_writes)
            row["auto_approvable"] = eligible
            row["would_auto_approve"] = eligible and row["refused"] == 0 and row["human_approved"] >= minimum
            rows.append(row)
        return {"enabled": True, "min_approvals": settings.min_approvals, "precedents": rows}

    async def forget(self, tool: str, agent: str) -> dict[str, Any]:
        """POST /approvals/precedents/forget: every decision of one couple, so it starts again from zero."""
        # Trimmed as memory trims tags: a blank tool would otherwise drop out of the tags and forget every
        # decision of the agent; a line break is refused by memory (a 502 for what is the caller's mistake).
        tool, agent = go_trim(tool), go_trim(agent)
        if not tool or not agent:
            raise BadRequest("tool and agent are required")
        if any(c in tool + agent for c in "\r\n"):
            raise BadRequest("tool and agent must be single lines")
        if not self._settings().auto_approve:
            raise Conflict("auto-approve is off: there are no precedents to forget")
        memory = self._memory()
        if memory is None:
            raise Conflict("no memory: precedents are off")
        try:
            result = await asyncio.wait_for(
                memory.call_tool(
                    "memory_forget",
                    {"tags": ["decision", tool, f"agent:{agent}"], "agent": WRITER_AGENT},
                ),
                max(self.timeout, 10.0),
            )
        except TimeoutError:
            raise MemoryUnavailable("memory did not answer in time") from None
        return {"tool": tool, "agent": agent, "result": result}


def _couple_of(fact: ListedMemory) -> tuple[str, str] | None:
    """(tool, agent) of a decision fact, from its tags; the key `decision.<tool>.<id>` settles ambiguity."""
    agent = next((t[6:] for t in fact.tags if t.startswith("agent:")), "")
    if not agent:
        return None
    rest = [t for t in fact.tags if t != "decision" and t not in _STATUSES and not t.startswith(("agent:", "by:"))]
    if len(rest) == 1:
        return rest[0], agent
    for t in rest:
        if fact.key.startswith(f"decision.{t}."):
            return t, agent
    return None


def wire_precedents(mesh: Any) -> None:
    """Build the decision writer and the precedent check over one mesh, and listen to its approvals.

    Components are looked up when used, not now, so the order of construction in Mesh does not matter."""
    from .memory_client import memory_client_for

    cached: list[MemoryClient] = []

    def memory() -> MemoryClient | None:
        if not cached:
            client = memory_client_for(mesh.settings, lambda: getattr(mesh, "memory", None))
            if client is None:
                return None
            cached.append(client)
        return cached[0]

    def settings() -> EffectiveSettings:
        approvals = getattr(mesh, "approvals", None)
        effective = getattr(approvals, "effective_settings", None)
        if effective is not None:
            e = effective()
            return EffectiveSettings(bool(e.auto_approve), int(e.min_approvals), bool(e.auto_approve_writes))
        s = mesh.settings
        return EffectiveSettings(s.auto_approve_enabled, s.supervisor.min_approvals, s.supervisor.auto_approve_writes)

    writer = DecisionWriter(memory, lambda: getattr(mesh, "metrics", None))
    mesh.decisions = writer
    mesh.precedents = Precedents(memory, settings, writer, lambda name: mesh.registry.lookup(name))
    approvals = getattr(mesh, "approvals", None)
    if approvals is not None and hasattr(approvals, "add_listener"):
        approvals.add_listener(writer.on_resolved)
