"""Step one of a governed call: decide. Halt -> lifecycle -> lookup -> policy and floors -> limits -> grant ->
precedents, ending in a verdict: the call stops here (halted, denied, rate limited, unknown tool), or it is allowed,
or it needs a human. Nothing is written here but a limit's count; the pipeline traces the verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flux7.shared.gate.call import ApprovalMode, Call, Outcome
from flux7.shared.gate.policy import Decision, stricter

if TYPE_CHECKING:
    from flux7.shared.gate.deps import GateDeps
    from flux7.shared.gate.grants import Grant
    from flux7.shared.gate.policy import Policy
    from flux7.shared.upstreams.base import ToolDef

__all__ = ["Decider", "Verdict"]


@dataclass(slots=True)
class Verdict:
    """What the decide step concluded. `stop`: the call ends with this outcome (traced unless the tool is
    unknown); otherwise `decision` is allow or human_approval."""

    decision: Decision
    tool: ToolDef | None = None
    policy: Policy | None = None  # the named policy that decided: its limits apply
    grant: Grant | None = None  # the grant that lifted a human_approval
    counted: bool = False  # an allowed call was counted against its limits by the check
    stop: Outcome | None = None


class Decider:
    def __init__(self, deps: GateDeps) -> None:
        self._deps = deps

    def floor_for(self, tool: ToolDef | None) -> Decision | None:
        """Floors (CONTRACT 1.3): a CLI dispatcher's default_action, a pin's status."""
        best: Decision | None = None
        if tool is None:
            return None
        if tool.source == "cli" and tool.cli_meta and tool.name.endswith(".__dispatch"):
            action = str(tool.cli_meta.get("default_action") or "") or "deny"
            best = Decision(action, f"cli:{tool.name}", f"cli default_action={action}")
        pin_floor = self._deps.pins.floor_for(tool)
        if pin_floor is not None:
            best = pin_floor if best is None else stricter(best, pin_floor)
        return best

    def lifecycle_floor(self, agent: str) -> Decision | None:
        """The catalog's floor for this agent (deny when suspended or retired)."""
        return self._deps.catalog.floor(agent)

    def evaluate(self, agent: str, tool_name: str, arguments: Any, tool: ToolDef | None) -> Decision:
        decision = self._deps.policies.current.decide(agent, tool_name, arguments)
        return stricter(decision, self.floor_for(tool))

    async def decide(self, call: Call, mode: ApprovalMode) -> Verdict:
        deps = self._deps
        agent = call.caller.agent_id
        trace_id = call.trace.trace_id

        # 1. emergency stop, before everything else
        halt = deps.halts.active_for(agent, call.session_id)
        if halt is not None:
            msg = halt.message
            stop = Outcome(
                status=403,
                policy="halted",
                trace_id=trace_id,
                rule=f"halt:{halt.id}",
                reason=msg,
                error=msg,
                halted=True,
                halt_message=msg,
            )
            return Verdict(Decision("deny", stop.rule, msg), stop=stop)

        # 1b. the catalog's lifecycle (shared/governance/catalog.py): a suspended or retired agent is refused
        # before any policy, traced with rule lifecycle:<state>
        refusal = self.lifecycle_floor(agent)
        if refusal is not None:
            return Verdict(refusal, stop=_refused(trace_id, 403, "deny", refusal))

        # 2. lookup (no trace for an unknown tool); /decide governs tools the caller runs itself
        tool = deps.registry.lookup(call.tool)
        if tool is None and mode not in ("decide", "decide_wait"):
            unknown = Outcome(
                status=404, policy="error", trace_id=trace_id, error=f"unknown tool: {call.tool}", unknown_tool=True
            )
            return Verdict(Decision("deny", "", unknown.error), stop=unknown)

        # 4, evaluated first: limits are keyed by the name of the policy that decides
        decision = self.evaluate(agent, call.tool, call.arguments, tool)
        policy = deps.policies.current.by_name.get(decision.rule)

        # 3. rate limit and loop detection, on every transport; an allowed call is checked and counted in one
        # write transaction: exact across workers and instances
        counted = decision.action == "allow"
        if decision.action != "deny":
            limited = deps.limits.check(agent, policy, call.tool, call.arguments, count=counted)
            if limited:
                limit = Decision(decision.action, decision.rule, limited)
                return Verdict(limit, tool, policy, stop=_refused(trace_id, 429, "rate_limited", limit))

        if decision.action == "deny":
            return Verdict(decision, tool, policy, stop=_refused(trace_id, 403, "deny", decision))

        # 5 and 6: a grant, then precedents from memory, may turn human_approval into allow
        grant = None
        if decision.action == "human_approval":
            grant = deps.grants.find(agent, call.tool)
            if grant is not None:
                decision = Decision("allow", f"grant:{grant.id}", f"grant {grant.id} covers {call.tool}")
            elif tool is not None:
                why = await deps.precedents.check(agent, tool, call.arguments, trace_id, call.session_id)
                if why is not None:
                    decision = Decision("allow", "supervisor:mem7", why)
        return Verdict(decision, tool, policy, grant, counted)


def _refused(trace_id: str, status: int, policy: str, decision: Decision) -> Outcome:
    return Outcome(
        status=status,
        policy=policy,
        trace_id=trace_id,
        rule=decision.rule,
        reason=decision.reason,
        error=decision.reason,
    )
