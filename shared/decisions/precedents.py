"""Precedents from memory, level 1 of the approval flow (docs/supervisor.md).

A call that needs approval passes at once when humans approved this very tool for this very agent at least
`min_approvals` times and nobody ever refused it. Only tools that read qualify unless `auto_approve_writes`.
Facts are read with `memory_list` on exact tags, never a semantic search. Anything unexpected - memory down,
slow (3 s), an unreadable answer, injection markers in the arguments - escalates: auto-approval only adds.

Memory is writable by anyone who reaches it, so its tags are a lead, not a proof. A listed approval counts only
when this deployment decided it (the ledger): its approvals table holds that approval id, approved by a human,
for this agent and tool, or the fact carries the mesh's signature over exactly that decision (a separate memory
shared by meshes with one `decisions.signing_key`). A refusal blocks whoever wrote it: blocking only adds
caution. `forget` records a reset: nothing decided before it counts again, whatever memory is given later."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flux7.shared.decisions.facts import WRITER_AGENT, DecisionWriter, resolver_kind, signed_decision
from flux7.shared.decisions.memory_client import ListedMemory, MemoryClient, MemoryUnavailable, parse_memory_list
from flux7.shared.decisions.signing import DecisionSigner
from flux7.shared.errors import BadRequest, Conflict
from flux7.shared.gate.audit import rfc3339
from flux7.shared.gate.guard import injection_risk
from flux7.shared.memory.workspace import go_trim
from flux7.shared.store.db import Database

if TYPE_CHECKING:
    from flux7.shared.gate.approvals import ApprovalQueue
    from flux7.shared.memory.service import MemoryService
    from flux7.shared.metrics import Metrics
    from flux7.shared.settings import Settings
    from flux7.shared.upstreams.registry import Registry

__all__ = [
    "EffectiveSettings",
    "LedgerView",
    "PrecedentLedger",
    "Precedents",
    "Verdict",
    "approval_reason",
    "decision_memory",
    "tool_is_eligible",
]

log = logging.getLogger("flux7.precedents")

CHECK_TIMEOUT_S = 3.0
_STATUSES = ("approved", "denied", "timeout")
_OWN_TAGS = ("agent:", "by:", "at:", "sig:", "approval:", "trace:")


@dataclass(frozen=True)
class EffectiveSettings:
    auto_approve: bool
    min_approvals: int
    auto_approve_writes: bool


@dataclass
class Verdict:
    """The precedent rule's answer for one call, with its reasons (the console shows them beside an approval)."""

    min_approvals: int
    auto_approve: bool
    approve: bool = False
    eligible: bool = False
    injection_risk: bool = False
    human_approvals: int | None = None  # None: memory was not read
    refused_facts: int = 0
    refused_here: bool = False
    memory: str = ""  # what went wrong reading memory
    reasons: list[str] = field(default_factory=list)

    def no(self, reason: str) -> Verdict:
        self.approve = False
        self.reasons.append(reason)
        return self


def _ineligible(tool: Any, auto_approve_writes: bool) -> str:
    if tool is None:
        return "the tool is not in the catalog now"
    c = tool.classification
    if c.family != "named":
        return f"not a named tool ({c.family}): only named read tools qualify"
    return f"not a read tool ({c.access}): writes qualify only with supervisor.auto_approve_writes"


def _decision_row(
    approval_id: str, status: str, resolved_by: str, kind: str, at: str, trace_id: str, source: str
) -> dict[str, Any]:
    return {
        "approval_id": approval_id,
        "status": status,
        "resolved_by": resolved_by,
        "kind": kind,
        "resolved_at": at,
        "trace_id": trace_id,
        "source": source,
    }


def _counts_note(status: str, kind: str, after_reset: bool, in_memory: bool, *, verified: bool) -> tuple[bool, str]:
    """Whether one past decision counts toward the precedent now, and if not, why."""
    if status == "denied":
        return False, "a refusal: blocks auto-approval"
    if status != "approved":
        return False, "timed out: neither counts nor blocks"
    if kind != "human":
        return False, f"approved by {kind or 'an unnamed resolver'}: only human approvals count"
    if not verified:
        return False, "not decided by this deployment and not signed by it: does not count"
    if not after_reset:
        return False, "before the precedents were forgotten: does not count"
    if not in_memory:
        return False, "its fact is not in memory yet (outbox): counts once delivered"
    return True, "counts"


def approval_reason(n: int) -> str:
    return f"mem7: {n} prior approvals, 0 rejections"


def tool_is_eligible(tool: Any, auto_approve_writes: bool) -> bool:
    """Only a named tool whose declared metadata says it reads; writes, generic and unknown tools go on."""
    if tool is None:
        return False
    if auto_approve_writes:
        return True
    c = tool.classification
    return bool(c.access == "read" and c.family == "named")


def _approved_tags(tool: str, agent: str) -> list[str]:
    return ["decision", "approved", "by:human", tool, f"agent:{agent}"]


def _refusal_tags(tool: str, agent: str) -> list[str]:
    return ["decision", "denied", tool, f"agent:{agent}"]


@dataclass
class LedgerView:
    """What the database says about some approval ids and couples, read once for a check or the table."""

    signer: DecisionSigner
    approvals: dict[str, tuple[str, str, str, str, str, float]] = field(default_factory=dict)  # id -> row
    resets: dict[tuple[str, str], float] = field(default_factory=dict)  # (tool, agent) -> reset_at
    refused_at: dict[tuple[str, str], float] = field(default_factory=dict)  # (tool, agent) -> newest refusal

    def reset_of(self, tool: str, agent: str) -> float:
        return self.resets.get((tool, agent), 0.0)

    def refused(self, tool: str, agent: str) -> bool:
        """This deployment refused the couple since its last reset (whether or not memory has the fact yet)."""
        return self.refused_at.get((tool, agent), 0.0) > self.reset_of(tool, agent)

    def counts(self, fact: ListedMemory, tool: str, agent: str) -> bool:
        """A listed human approval of this couple that this deployment decided, after the couple's reset."""
        since = self.reset_of(tool, agent)
        prefix = f"decision.{tool}."
        approval_id = fact.key[len(prefix) :] if fact.key.startswith(prefix) else ""
        row = self.approvals.get(approval_id) if approval_id else None
        if row is not None:  # this deployment's own record decides, whatever the fact claims
            row_agent, row_tool, status, resolved_by, note, resolved_at = row
            human = resolver_kind(resolved_by, note) == "human"
            return (row_agent, row_tool, status) == (agent, tool, "approved") and human and resolved_at > since
        signed = signed_decision(fact.key, fact.tags, tool, agent, self.signer)
        return signed is not None and signed.status == "approved" and signed.kind == "human" and signed.at > since


class PrecedentLedger:
    """The authority behind precedents: this deployment's approvals, its resets, and its signing key.

    Without a database (a check over a separate memory only), signatures alone vouch and nothing is reset."""

    def __init__(self, signer: DecisionSigner, db: Database | None = None) -> None:
        self.signer = signer
        self._db = db

    def view(self, approval_ids: Iterable[str], couple: tuple[str, str] | None = None) -> LedgerView:
        """Read the approvals among `approval_ids`, and the resets and refusals of one couple (or of all)."""
        out = LedgerView(self.signer)
        if self._db is None:
            return out
        ids = sorted({i for i in approval_ids if i})
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = self._db.query(
                "SELECT id, agent_id, tool, status, resolved_by, resolved_note, resolved_at FROM approvals "
                f"WHERE id IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            )
            for r in rows:
                out.approvals[r[0]] = (r[1], r[2], r[3], r[4], r[5], float(r[6] or 0.0))
        where, params = ("WHERE tool = ? AND agent_id = ?", couple) if couple is not None else ("", ())
        for r in self._db.query(f"SELECT tool, agent_id, reset_at FROM precedent_resets {where}", params):
            out.resets[(r[0], r[1])] = float(r[2])
        refusals = (
            "SELECT tool, agent_id, max(resolved_at) FROM approvals WHERE status = 'denied' "
            + ("AND agent_id = ? AND tool = ? " if couple is not None else "")
            + "GROUP BY tool, agent_id"
        )
        for r in self._db.query(refusals, (couple[1], couple[0]) if couple is not None else ()):
            out.refused_at[(r[0], r[1])] = float(r[2] or 0.0)
        return out

    def reset(self, tool: str, agent: str, by: str) -> float:
        """From now on, nothing this couple was decided before counts."""
        now = time.time()
        if self._db is not None:
            self._db.execute(
                "INSERT INTO precedent_resets (tool, agent_id, reset_at, reset_by) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(tool, agent_id) DO UPDATE SET reset_at = excluded.reset_at, reset_by = excluded.reset_by",
                (tool, agent, now, by),
            )
        return now


class Precedents:
    """`check` is what the pipeline calls at step 6; `table` and `forget` serve the control plane."""

    def __init__(
        self,
        memory: Callable[[], MemoryClient | None],
        settings: Callable[[], EffectiveSettings],
        ledger: PrecedentLedger,
        writer: DecisionWriter | None = None,
        lookup: Callable[[str], Any] | None = None,
        *,
        timeout: float = CHECK_TIMEOUT_S,
        record: Callable[[str, str, Any, str, str, str], Any] | None = None,
    ) -> None:
        self._memory = memory
        self._settings = settings
        self.ledger = ledger
        self._writer = writer
        self._lookup = lookup or (lambda _name: None)
        self.timeout = timeout
        # record(agent, tool, arguments, trace_id, reason, session_id): an auto-approval as a settled approval
        self._record = record

    # -- level 1 --------------------------------------------------------------------------------------

    async def check(
        self, agent: str, tool: Any, arguments: Any, trace_id: str = "", session_id: str = ""
    ) -> str | None:
        """The auto-approval reason, or None to go on to the approval queue. Never raises.

        An auto-approval is recorded before it is returned (a settled approval row with its fact, or a bare
        fact without a queue); if that record cannot be written, the call goes to the queue: fail closed."""
        verdict = await self.evaluate(agent, tool, arguments)
        if not verdict.approve:
            return None
        reason = approval_reason(verdict.human_approvals or 0)
        try:
            if self._record is not None:
                await asyncio.to_thread(self._record, agent, tool.name, arguments, trace_id, reason, session_id)
            elif self._writer is not None:
                self._writer.record_auto_approval(agent, tool.name, reason, trace_id)
        except Exception as e:
            log.warning("auto-approval of %s not recorded, escalating: %s", tool.name, e)
            return None
        return reason

    async def evaluate(self, agent: str, tool: Any, arguments: Any, *, quiet: bool = False) -> Verdict:
        """What the precedent rule decides for this call now, and why. Never raises: anything unexpected escalates.
        `quiet`: an explanation (the console), not a call - nothing is logged."""
        settings = self._settings()
        minimum = max(1, settings.min_approvals)
        name = getattr(tool, "name", "?")
        verdict = Verdict(min_approvals=minimum, auto_approve=settings.auto_approve)
        if not settings.auto_approve:
            return verdict.no("auto-approve is off (supervisor.auto_approve)")
        verdict.eligible = tool_is_eligible(tool, settings.auto_approve_writes)
        if not verdict.eligible:
            return verdict.no(_ineligible(tool, settings.auto_approve_writes))
        if injection_risk(arguments):
            verdict.injection_risk = True
            if not quiet:
                log.warning(
                    "injection risk detected, forcing human review: agent=%s tool=%s (precedents skipped)", agent, name
                )
            return verdict.no("the arguments look like a prompt injection: a human reviews it")
        memory = self._memory()
        if memory is None:
            return verdict.no("no memory: set memory.url or run the memory role in this process")
        try:
            found = await asyncio.wait_for(self._count(memory, name, agent), self.timeout)
        except TimeoutError:
            if not quiet:
                log.warning("memory slower than %.1fs: precedents for %s escalate", self.timeout, name)
            verdict.memory = f"memory slower than {self.timeout:g}s"
            return verdict.no(f"{verdict.memory}: escalates")
        except Exception as e:
            if not quiet:
                log.warning("precedents for %s escalate: %s", name, e)
            verdict.memory = str(e) or e.__class__.__name__
            return verdict.no(f"memory unreadable ({verdict.memory}): escalates")
        verdict.human_approvals, verdict.refused_facts, verdict.refused_here = found
        if verdict.refused_facts:
            return verdict.no(f"refused before ({verdict.refused_facts} refusal(s) in memory): a refusal blocks")
        if verdict.refused_here:
            return verdict.no("this deployment refused it before: a refusal blocks")
        if verdict.human_approvals < minimum:
            return verdict.no(f"{verdict.human_approvals} of {minimum} human approvals needed")
        verdict.approve = True
        verdict.reasons.append(f"{verdict.human_approvals} human approvals (at least {minimum}) and no refusal")
        return verdict

    async def _count(self, memory: MemoryClient, tool: str, agent: str) -> tuple[int, int, bool]:
        """(human approvals of this couple that this deployment decided, refusal facts in memory, whether this
        deployment refused the couple since its reset). Raises on unreadable answers."""
        approved_text, refused_text = await asyncio.gather(
            memory.call_tool("memory_list", {"tags": _approved_tags(tool, agent)}),
            memory.call_tool("memory_list", {"tags": _refusal_tags(tool, agent)}),
        )
        refused = len(parse_memory_list(refused_text))  # a refusal fact blocks, signed or not: fail closed
        required = set(_approved_tags(tool, agent))
        # The tags were the query; checking them again costs nothing and guards a memory that matched loosely.
        listed = [m for m in parse_memory_list(approved_text) if required <= set(m.tags)]
        prefix = f"decision.{tool}."
        ids = [m.key[len(prefix) :] for m in listed if m.key.startswith(prefix)]
        view = await asyncio.to_thread(self.ledger.view, ids, (tool, agent))
        counted = len({m.key for m in listed if view.counts(m, tool, agent)})
        return counted, refused, view.refused(tool, agent)

    async def explain(self, approval: Any, history: list[Any]) -> dict[str, Any]:
        """GET /approvals/{id}/precedents: the past decisions of this approval's tool and agent - this deployment's
        (the approvals table, `history`) and those only memory holds - and what the rule would do with the call now."""
        tool_name, agent = str(approval.tool), str(approval.agent_id)
        verdict = await self.evaluate(agent, self._lookup(tool_name), approval.params, quiet=True)
        facts: list[ListedMemory] = []
        memory_error = verdict.memory
        memory = self._memory()
        if memory is not None:
            try:
                text = await asyncio.wait_for(
                    memory.call_tool("memory_list", {"tags": ["decision", tool_name, f"agent:{agent}"]}), self.timeout
                )
                facts = [f for f in parse_memory_list(text) if _couple_of(f) == (tool_name, agent)]
            except TimeoutError:
                memory_error = memory_error or f"memory slower than {self.timeout:g}s"
            except Exception as e:
                memory_error = memory_error or str(e) or e.__class__.__name__
        prefix = f"decision.{tool_name}."
        in_memory = {f.key: f for f in facts}
        view = await asyncio.to_thread(self.ledger.view, [], (tool_name, agent))
        since = view.reset_of(tool_name, agent)
        rows: list[dict[str, Any]] = []
        for a in history:
            fact = in_memory.pop(f"{prefix}{a.id}", None)
            kind = resolver_kind(a.resolved_by, a.resolved_note)
            row = _decision_row(a.id, a.status, a.resolved_by, kind, a.resolved_at, a.trace_id, "ledger")
            row["reasoning"] = a.reasoning
            row["in_memory"] = fact is not None
            row["counts"], row["note"] = _counts_note(
                a.status, kind, (a.resolved_ts or 0.0) > since, fact is not None, verified=True
            )
            rows.append(row)
        for fact in in_memory.values():  # decided elsewhere (another mesh sharing memory) or written by anyone
            approval_id = fact.key[len(prefix) :] if fact.key.startswith(prefix) else ""
            if approval_id == approval.id:
                continue
            status = next((t for t in fact.tags if t in _STATUSES), "")
            tagged_kind: str = next((t[3:] for t in fact.tags if t.startswith("by:")), "")
            signed = signed_decision(fact.key, fact.tags, tool_name, agent, self.ledger.signer)
            trace = next((t[6:] for t in fact.tags if t.startswith("trace:")), "")
            row = _decision_row(approval_id, status, "", tagged_kind, fact.updated, trace, "memory")
            row["in_memory"] = True
            row["signed"] = signed is not None
            after = signed is not None and signed.at > since
            row["counts"], row["note"] = _counts_note(status, tagged_kind, after, True, verified=signed is not None)
            rows.append(row)
        rows.sort(key=lambda r: r["resolved_at"], reverse=True)
        rule: dict[str, Any] = {
            "would_auto_approve": verdict.approve,
            "reasons": verdict.reasons,
            "auto_approve": verdict.auto_approve,
            "eligible": verdict.eligible,
            "injection_risk": verdict.injection_risk,
            "min_approvals": verdict.min_approvals,
            # the check reads memory only when it gets that far; otherwise the rows above say what would count
            "human_approvals": (
                verdict.human_approvals if verdict.human_approvals is not None else sum(r["counts"] for r in rows)
            ),
            "refusals": verdict.refused_facts + (1 if verdict.refused_here else 0),
        }
        if since:
            rule["reset_at"] = rfc3339(since)
        out: dict[str, Any] = {"approval_id": approval.id, "tool": tool_name, "agent": agent, "rule": rule}
        out["decisions"] = rows
        if memory_error:
            out["memory_error"] = memory_error
        return out

    # -- the control plane -----------------------------------------------------------------------------

    def disabled_reason(self) -> str:
        if not self._settings().auto_approve:
            return "auto-approve is off (supervisor.auto_approve)"
        if self._memory() is None:
            return "no memory: set memory.url or run the memory role in this process"
        return ""

    def _outbox(self) -> dict[str, Any]:
        outbox = self._writer.outbox if self._writer is not None else None
        if outbox is None:
            return {"pending": 0}
        pending = outbox.pending()
        return {"pending": pending, "last_error": outbox.oldest_error()} if pending else {"pending": 0}

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
        placed = [(fact, couple) for fact in facts if (couple := _couple_of(fact)) is not None]
        ids = [fact.key[len(f"decision.{c[0]}.") :] for fact, c in placed if fact.key.startswith(f"decision.{c[0]}.")]
        view = await asyncio.to_thread(self.ledger.view, ids)
        couples: dict[tuple[str, str], dict[str, Any]] = {}
        for fact, couple in placed:
            row = couples.setdefault(
                couple,
                {
                    "tool": couple[0],
                    "agent": couple[1],
                    "human_approved": 0,
                    "unverified": 0,
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
            elif "approved" in tags and by == "human":
                row["human_approved" if view.counts(fact, *couple) else "unverified"] += 1
            elif "approved" in tags and by:
                row["other_approved"] += 1
            row["last"] = max(row["last"], fact.updated)
        rows: list[dict[str, Any]] = []
        minimum = max(1, settings.min_approvals)
        for (tool_name, agent), row in sorted(couples.items()):
            eligible = tool_is_eligible(self._lookup(tool_name), settings.auto_approve_writes)
            blocked = row["refused"] > 0 or view.refused(tool_name, agent)
            row["auto_approvable"] = eligible
            row["would_auto_approve"] = eligible and not blocked and row["human_approved"] >= minimum
            rows.append(row)
        return {
            "enabled": True,
            "min_approvals": settings.min_approvals,
            "precedents": rows,
            "outbox": self._outbox(),
        }

    async def forget(self, tool: str, agent: str, by: str = "") -> dict[str, Any]:
        """POST /approvals/precedents/forget: every decision of one couple, so it starts again from zero.

        The reset is recorded first, in the database: from then on nothing decided before it counts, even if
        memory cannot be reached now or is handed the old facts again later."""
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
        await asyncio.to_thread(self.ledger.reset, tool, agent, by)
        outbox = self._writer.outbox if self._writer is not None else None
        if outbox is not None:
            await asyncio.to_thread(outbox.drop, tool, agent)
        try:
            result = await asyncio.wait_for(
                memory.call_tool(
                    "memory_forget",
                    {"tags": ["decision", tool, f"agent:{agent}"], "agent": WRITER_AGENT},
                ),
                max(self.timeout, 10.0),
            )
        except TimeoutError:
            raise MemoryUnavailable(
                "memory did not answer in time (the reset is recorded: past decisions no longer count)"
            ) from None
        except MemoryUnavailable as e:
            raise MemoryUnavailable(f"{e.message} (the reset is recorded: past decisions no longer count)") from None
        return {"tool": tool, "agent": agent, "result": result}


def _couple_of(fact: ListedMemory) -> tuple[str, str] | None:
    """(tool, agent) of a decision fact, from its tags; the key `decision.<tool>.<id>` settles ambiguity."""
    agent = next((t[6:] for t in fact.tags if t.startswith("agent:")), "")
    if not agent:
        return None
    rest = [t for t in fact.tags if t != "decision" and t not in _STATUSES and not t.startswith(_OWN_TAGS)]
    if len(rest) == 1:
        return rest[0], agent
    for t in rest:
        if fact.key.startswith(f"decision.{t}."):
            return t, agent
    return None


def decision_memory(
    settings: Settings,
    db: Database,
    approvals: ApprovalQueue,
    metrics: Metrics,
    registry: Registry,
    service: MemoryService | None,
) -> tuple[DecisionWriter, Precedents]:
    """The decision writer and the precedent check of one mesh, listening to its approvals: every resolution's
    fact is written in the resolution's own transaction, then delivered once it has committed."""
    from flux7.shared.decisions.memory_client import memory_client_for
    from flux7.shared.decisions.outbox import DecisionOutbox
    from flux7.shared.decisions.signing import signer_for

    cached: list[MemoryClient] = []

    def memory() -> MemoryClient | None:  # connected on first use: a remote memory may come up after the mesh
        if not cached:
            client = memory_client_for(settings, lambda: service)
            if client is None:
                return None
            cached.append(client)
        return cached[0]

    def effective() -> EffectiveSettings:
        e = approvals.effective_settings()
        return EffectiveSettings(bool(e.auto_approve), int(e.min_approvals), bool(e.auto_approve_writes))

    signer = signer_for(settings, db.path)
    writer = DecisionWriter(
        memory,
        lambda: metrics,
        signer=signer,
        outbox=DecisionOutbox(db),
        retry_max=settings.decisions.retry_max_seconds,
    )

    def record(agent: str, tool: str, arguments: Any, trace_id: str, reason: str, session_id: str) -> Any:
        return approvals.record_settled(
            agent=agent,
            tool=tool,
            arguments=arguments,
            trace_id=trace_id,
            policy_rule="supervisor:mem7",
            resolved_by="supervisor:mem7",
            reasoning=reason,
            session_id=session_id,
        )

    precedents = Precedents(memory, effective, PrecedentLedger(signer, db), writer, registry.lookup, record=record)
    approvals.add_transaction_hook(writer.enqueue_resolved)
    approvals.add_listener(writer.on_resolved)
    return writer, precedents
