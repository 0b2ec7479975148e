"""The governed call's three steps, each alone over fakes (tests/gate/fakes.py): decide, the approval strategies,
execute. The pipeline's behaviour end to end is held by the tests that drive real meshes."""

from __future__ import annotations

import pytest

from flux7.shared.gate.approval_flow import Release, strategy_for
from flux7.shared.gate.call import Outcome
from flux7.shared.gate.decide import Decider, Verdict
from flux7.shared.gate.execute import Executor
from flux7.shared.gate.policy import Decision
from flux7.shared.gate.tty_prompt import TerminalChannel
from flux7.shared.upstreams.base import UpstreamResult
from tests.gate.fakes import Fakes, Grant, Halt, Recorder, approval, call, tool

ASK = Decision("human_approval", "agents", "needs a human")


# -- decide ---------------------------------------------------------------------------------------------------


async def test_a_halt_stops_the_call_before_anything_else_is_consulted() -> None:
    f = Fakes()
    f.halt = Halt("h1", "stopped: runaway loop")
    verdict = await Decider(f.deps()).decide(call(), "block")
    assert verdict.stop is not None
    assert (verdict.stop.status, verdict.stop.policy, verdict.stop.rule) == (403, "halted", "halt:h1")
    assert verdict.stop.halted and verdict.stop.error == "stopped: runaway loop"
    assert f.log == ["halt"]


async def test_a_suspended_agent_is_refused_by_its_lifecycle_before_the_policy() -> None:
    f = Fakes()
    f.lifecycle = Decision("deny", "lifecycle:suspended", "agent claude is suspended")
    verdict = await Decider(f.deps()).decide(call(), "block")
    assert verdict.stop is not None and (verdict.stop.status, verdict.stop.rule) == (403, "lifecycle:suspended")
    assert f.log == ["halt", "lifecycle"]


async def test_an_unknown_tool_is_404_but_decide_governs_tools_the_caller_runs_itself() -> None:
    f = Fakes()
    verdict = await Decider(f.deps()).decide(call("nope.tool"), "block")
    assert verdict.stop is not None and verdict.stop.unknown_tool and verdict.stop.status == 404
    decided = await Decider(f.deps()).decide(call("nope.tool"), "decide")
    assert decided.stop is None and decided.decision.action == "allow" and decided.tool is None


async def test_a_deny_is_never_counted_against_limits_and_an_allow_is_counted_by_its_check() -> None:
    f = Fakes()
    f.policies.decision = Decision("deny", "agents", "no deletes")
    denied = await Decider(f.deps()).decide(call(), "block")
    assert denied.stop is not None and (denied.stop.status, denied.stop.policy) == (403, "deny")
    assert "limits.check(count=True)" not in f.log and "limits.check(count=False)" not in f.log
    f = Fakes()
    allowed = await Decider(f.deps()).decide(call(), "block")
    assert allowed.stop is None and allowed.counted and "limits.check(count=True)" in f.log


async def test_a_call_over_its_limit_is_429_with_the_limits_words() -> None:
    f = Fakes()
    f.limited = "rate limit exceeded: 5 calls per minute"
    verdict = await Decider(f.deps()).decide(call(), "block")
    assert verdict.stop is not None
    assert (verdict.stop.status, verdict.stop.policy, verdict.stop.error) == (429, "rate_limited", f.limited)


async def test_a_grant_lifts_human_approval_before_precedents_are_asked() -> None:
    f = Fakes()
    f.policies.decision = ASK
    f.grant = Grant("g1", trace_id="t0")
    verdict = await Decider(f.deps()).decide(call(), "block")
    assert verdict.decision == Decision("allow", "grant:g1", "grant g1 covers pets.get")
    assert verdict.grant is f.grant and not verdict.counted  # counted when its intent is written
    assert "precedents" not in f.log


async def test_precedents_lift_human_approval_and_otherwise_it_stays() -> None:
    f = Fakes()
    f.policies.decision = ASK
    f.precedent = "approved 3 times by humans"
    verdict = await Decider(f.deps()).decide(call(), "block")
    assert verdict.decision == Decision("allow", "supervisor:mem7", "approved 3 times by humans")
    f.precedent = None
    assert (await Decider(f.deps()).decide(call(), "block")).decision == ASK


async def test_floors_make_a_decision_stricter_never_looser() -> None:
    f = Fakes()
    f.tools["cli.__dispatch"] = tool("cli.__dispatch", source="cli", cli_meta={"default_action": "deny"})
    verdict = await Decider(f.deps()).decide(call("cli.__dispatch"), "block")
    assert verdict.stop is not None and verdict.stop.rule == "cli:cli.__dispatch"
    f.policies.decision = Decision("deny", "agents", "no")
    f.pin_floor = Decision("allow", "pin", "pinned")
    assert Decider(f.deps()).evaluate("claude", "pets.get", {}, tool()).action == "deny"


# -- the approval strategies ----------------------------------------------------------------------------------


def _ask_verdict() -> Verdict:
    return Verdict(ASK, tool())


async def _never_rerun(_c: object) -> Outcome:
    raise AssertionError("no rerun expected")


async def test_block_answers_a_denial_with_the_resolver_and_its_settled_row() -> None:
    f, rec = Fakes(), None
    f.resolution = approval("denied", "user:bob")
    rec = Recorder(f.log)
    out = await strategy_for("block", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(out, Outcome)
    assert (out.status, out.error, out.approval_status) == (403, "approval denied by user:bob", "denied")
    assert f.log == ["trace 202", "wait", "settle 403 row 7"]


async def test_block_releases_an_approved_call_with_its_pending_row_as_intent() -> None:
    f = Fakes()
    rec = Recorder(f.log)
    released = await strategy_for("block", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(released, Release) and released.row_id == 7
    assert f.log == ["trace 202", "wait", "limits.admit", "intent row 7"]


async def test_an_approved_call_over_its_limit_is_refused_as_released_and_never_runs() -> None:
    f = Fakes()
    f.admit_refusal = "rate limit exceeded"
    rec = Recorder(f.log)
    out = await strategy_for("block", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(out, Outcome) and (out.status, out.policy, out.approval_status) == (
        429,
        "rate_limited",
        "approved",
    )


async def test_decide_and_wait_answers_200_with_the_approval_and_never_releases() -> None:
    f = Fakes()
    rec = Recorder(f.log)
    out = await strategy_for("decide_wait", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(out, Outcome) and (out.status, out.approval_status, out.resolved_by) == (
        200,
        "approved",
        "user:alice",
    )


async def test_decide_only_queues_nothing() -> None:
    f = Fakes()
    rec = Recorder(f.log)
    out = await strategy_for("decide", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(out, Outcome) and (out.status, out.policy) == (200, "human_approval")
    assert f.submitted == [] and f.log == ["final 200"]


async def test_claim_uses_an_approval_given_earlier_in_the_transaction_of_its_intent() -> None:
    f = Fakes()
    f.claimable = approval("approved", "user:alice")
    rec = Recorder(f.log)
    released = await strategy_for("claim", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(released, Release) and released.row_id == 9
    assert f.log == ["limits.admit", "intent in claim"]


async def test_claim_without_a_terminal_queues_the_call_and_tells_the_agent_it_is_pending() -> None:
    f = Fakes()
    rec = Recorder(f.log)
    out = await strategy_for("claim", f.deps(), rec, _never_rerun).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(out, Outcome) and (out.status, out.approval_status) == (202, "pending")
    assert len(f.submitted) == 1 and f.resolved == []


class _Terminal(TerminalChannel):
    def __init__(self, answer: str | None) -> None:
        super().__init__(fail_closed=False)
        self.answer = answer

    async def ask(self, view: dict[str, object], timeout: float) -> tuple[object, str]:
        return self.answer, "answered at the terminal"


@pytest.mark.parametrize(("answer", "status"), [("approve", 200), ("deny", 403)])
async def test_claim_asks_the_terminal_the_stdio_transport_brought(answer: str, status: int) -> None:
    f = Fakes()
    rec = Recorder(f.log)
    reruns: list[object] = []

    async def rerun(again: object) -> Outcome:
        reruns.append(again)
        return Outcome(status=200, policy="human_approval", trace_id="t")

    out = await strategy_for("claim", f.deps(), rec, rerun, _Terminal(answer)).settle(call(), _ask_verdict(), 0.0)
    assert isinstance(out, Outcome) and out.status == status
    assert f.resolved == [("a1", answer, "tty")] and len(reruns) == (1 if answer == "approve" else 0)


# -- execute --------------------------------------------------------------------------------------------------


async def test_execute_writes_the_intent_before_the_upstream_and_the_outcome_after() -> None:
    f = Fakes()
    rec = Recorder(f.log)
    out = await Executor(f.deps(), rec).execute(
        call(), Verdict(Decision("allow", "a", "ok"), tool()), tool(), 0.0, None
    )
    assert (out.status, out.result, out.has_result) == (200, {"ok": True}, True)
    assert f.log == ["begin (counts: True)", "upstream", "outcome 200 row 3"]


async def test_a_call_counted_by_its_check_is_not_counted_again_and_a_released_one_reuses_its_row() -> None:
    f = Fakes()
    rec = Recorder(f.log)
    counted = Verdict(Decision("allow", "a", "ok"), tool(), counted=True)
    await Executor(f.deps(), rec).execute(call(), counted, tool(), 0.0, None)
    assert f.log[0] == "begin (counts: False)"
    f.log.clear()
    released = Release(approval("approved", "user:alice"), 7)
    out = await Executor(f.deps(), rec).execute(call(), Verdict(ASK, tool()), tool(), 0.0, released)
    assert f.log == ["upstream", "outcome 200 row 7"]
    assert (out.policy, out.approval_status, out.resolved_by) == ("human_approval", "approved", "user:alice")


@pytest.mark.parametrize(
    ("upstream", "status"),
    [
        (UpstreamResult(status_code=500, result={"err": 1}), 502),
        (UpstreamResult(status_code=504, error="timed out", timed_out=True), 504),
        (ConnectionError("refused"), 502),
    ],
)
async def test_an_upstream_failure_is_the_calls_result_never_the_servers(upstream: object, status: int) -> None:
    f = Fakes()
    f.upstream = upstream
    rec = Recorder(f.log)
    out = await Executor(f.deps(), rec).execute(
        call(), Verdict(Decision("allow", "a", "ok"), tool()), tool(), 0.0, None
    )
    assert out.status == status and out.error
    assert f.log[-1] == f"outcome {status} row 3"  # the outcome is recorded whatever happened
