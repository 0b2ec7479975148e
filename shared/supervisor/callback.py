"""The Claude Code callback: evaluations that wait for a verdict from a connected MCP session.

An evaluation that reaches the LLM step with the `claude-code` provider is posted here and waits up to
`evaluator.callback_timeout`; the session reads the waiting ones with `sup7_pending` and answers one with
`sup7_verdict`. No answer in time is None, which the provider chain treats as a failed provider (the next one, or
escalation). The first verdict for an id wins; a late or unknown one is refused, so nothing is decided twice."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from flux7.shared.supervisor.providers import Verdict

__all__ = ["DECISIONS", "UnknownEvaluation", "VerdictDesk", "Waiting"]

DECISIONS = ("APPROVE", "DENY", "ESCALATE")

# What a reviewer is shown besides tool, agent and params: the parts of the mesh's approval detail that say why the
# call is here. Recent traces are summarised (tool, outcome, time): their params are not redacted by the mesh.
_CONTEXT_KEYS = ("policy_rule", "active_grants", "remaining", "trace_id", "created_at")
_TRACE_KEYS = ("tool", "policy", "policy_rule", "status_code", "timestamp")
_RECENT = 5
_MAX_REASONING = 1000  # it lands in the decision log, the approval and the trace


class UnknownEvaluation(LookupError):
    """No evaluation with this id is waiting: never posted, already answered, or timed out."""


@dataclass
class Waiting:
    approval_id: str
    detail: dict[str, Any]
    rule_trail: list[dict[str, Any]]
    since: float  # time.time()
    deadline: float  # time.monotonic()
    answer: asyncio.Future[Verdict] = field(
        repr=False, default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def view(self) -> dict[str, Any]:
        d = self.detail
        return {
            "id": self.approval_id,
            "call": {"tool": d.get("tool"), "agent_id": d.get("agent_id"), "params": d.get("params")},
            "context": {
                **{k: d[k] for k in _CONTEXT_KEYS if k in d},
                "injection_risk": bool(d.get("injection_risk")),
                "recent_activity": [
                    {k: t[k] for k in _TRACE_KEYS if k in t}
                    for t in (d.get("recent_traces") or [])[:_RECENT]
                    if isinstance(t, dict)
                ],
            },
            "rule_trail": self.rule_trail,
            "waiting_since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)),
            "expires_in_s": max(0, round(self.deadline - time.monotonic(), 1)),
        }


class VerdictDesk:
    """Evaluations waiting for a session's verdict, in arrival order. Lives in sup7's event loop."""

    def __init__(self, timeout: float, threshold: float) -> None:
        self.timeout = timeout
        self.threshold = threshold
        self._waiting: dict[str, Waiting] = {}
        self._arrived = asyncio.Event()  # set while something waits; lets sup7_pending long-poll

    async def ask(self, detail: dict[str, Any], rule_trail: list[dict[str, Any]]) -> Verdict | None:
        """Post one evaluation and wait for its verdict; None when none arrives within the timeout."""
        aid = str(detail.get("id", ""))
        if not aid or aid in self._waiting:
            return None  # the loop never evaluates one id twice at once; refuse rather than overwrite
        waiting = Waiting(aid, detail, rule_trail, time.time(), time.monotonic() + self.timeout)
        self._waiting[aid] = waiting
        self._arrived.set()
        try:
            return await asyncio.wait_for(asyncio.shield(waiting.answer), self.timeout)
        except TimeoutError:
            # A verdict delivered in the same tick as the timeout was already acknowledged to the session: keep it.
            if waiting.answer.done() and not waiting.answer.cancelled():
                return waiting.answer.result()
            return None
        finally:
            self._waiting.pop(aid, None)
            if not self._waiting:
                self._arrived.clear()
            if not waiting.answer.done():
                waiting.answer.cancel()

    def ids(self) -> list[str]:
        return list(self._waiting)

    def pending(self) -> list[dict[str, Any]]:
        return [w.view() for w in self._waiting.values()]

    async def wait_for_pending(self, seconds: float) -> list[dict[str, Any]]:
        """The waiting evaluations, after waiting up to `seconds` for one to arrive when there are none."""
        if not self._waiting and seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), seconds)
        return self.pending()

    def answer(self, approval_id: str, decision: str, confidence: float, reasoning: str) -> dict[str, Any]:
        """Deliver a verdict. Raises UnknownEvaluation or ValueError; returns what sup7 will do with it."""
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
        waiting = self._waiting.get(approval_id)
        if waiting is None or waiting.answer.done():
            raise UnknownEvaluation(
                f"no evaluation {approval_id!r} is waiting for a verdict (unknown, already answered or timed out); "
                "call sup7_pending for the current ones"
            )
        action = decision.lower()
        text = " ".join(reasoning.split())[:_MAX_REASONING] or "(no reasoning given)"
        waiting.answer.set_result(Verdict(action, confidence, text))
        if action != "escalate" and confidence < self.threshold:
            outcome = f"escalated: confidence {confidence:.2f} below threshold {self.threshold}"
        else:
            outcome = {"approve": "approved", "deny": "denied", "escalate": "escalated"}[action]
        return {"id": approval_id, "decision": decision, "confidence": confidence, "outcome": outcome}
