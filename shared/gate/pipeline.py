"""The one pipeline every transport enters (docs/design/architecture.md), in three steps:

1. decide (shared/gate/decide.py): halt -> lifecycle -> lookup -> policy and floors -> limits -> grant ->
   precedents, ending in a verdict;
2. a call that needs a human waits as its approval mode says (shared/gate/approval_flow.py);
3. execute (shared/gate/execute.py): intent -> upstream -> outcome, fail closed.

REST, /decide and MCP (HTTP and stdio) build a `Call` and get an `Outcome`; only step 2 differs by mode. What each
step writes, and why the audit trail fails closed, is shared/gate/record.py."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from flux7.shared.gate.approval_flow import Release, answer_decision, strategy_for
from flux7.shared.gate.call import ApprovalMode, Call, Outcome
from flux7.shared.gate.decide import Decider
from flux7.shared.gate.execute import Executor
from flux7.shared.gate.record import CallRecorder
from flux7.shared.gate.tty_prompt import TerminalChannel

if TYPE_CHECKING:
    from flux7.shared.gate.deps import GateDeps

__all__ = ["ApprovalMode", "Call", "Outcome", "Pipeline"]


class Pipeline:
    def __init__(self, deps: GateDeps) -> None:
        self._deps = deps
        self.recorder = CallRecorder(deps.tracer, deps.metrics, deps.registry)
        self.decider = Decider(deps)
        self._executor = Executor(deps, self.recorder)

    async def run(
        self, call: Call, mode: ApprovalMode = "block", *, terminal: TerminalChannel | None = None
    ) -> Outcome:
        """One governed call. `terminal`: the tty approval channel, which only the stdio transport brings."""
        start = time.perf_counter()
        verdict = await self.decider.decide(call, mode)
        if verdict.stop is not None:
            if not verdict.stop.unknown_tool:  # an unknown tool is answered without a trace
                await self.recorder.final(call, verdict.stop, start)
            return verdict.stop

        release: Release | None = None
        action = verdict.decision.action
        if action == "allow" and mode in ("decide", "decide_wait"):
            return await answer_decision(self.recorder, call, verdict, start)  # the caller runs the tool itself
        if action == "human_approval":

            async def rerun(again: Call) -> Outcome:
                return await self.run(again, mode, terminal=terminal)

            settled = await strategy_for(mode, self._deps, self.recorder, rerun, terminal).settle(call, verdict, start)
            if isinstance(settled, Outcome):
                return settled
            release = settled
        assert verdict.tool is not None  # only /decide goes on without a registered tool, and it never runs one
        return await self._executor.execute(call, verdict, verdict.tool, start, release)
