"""Fakes of the gate's collaborators (shared/gate/deps.py), for testing each step alone: no database, no sockets.

Each fake keeps what it was asked, so a test can say what a step consulted and in which order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flux7.shared.auth.identity import Caller
from flux7.shared.gate.call import Call, Outcome
from flux7.shared.gate.deps import GateDeps
from flux7.shared.gate.policy import Decision
from flux7.shared.tracecontext import TraceContext
from flux7.shared.upstreams.base import Classification, ToolDef, UpstreamResult

__all__ = ["Fakes", "approval", "call", "tool"]


def tool(name: str = "pets.get", source: str = "openapi", **kw: Any) -> ToolDef:
    return ToolDef(name=name, source=source, classification=Classification("named", "read"), **kw)


def call(tool_name: str = "pets.get", agent: str = "claude", arguments: Any = None) -> Call:
    return Call(
        caller=Caller(agent_id=agent, authenticated=True),
        tool=tool_name,
        arguments=arguments if arguments is not None else {"id": 1},
        trace=TraceContext("t" * 32, "s" * 16),
    )


@dataclass
class FakeApproval:
    id: str = "a1"
    status: str = "pending"
    resolved_by: str = ""
    resolved_at: str = ""
    created_at: str = ""
    reasoning: str = ""
    confidence: float | None = None
    agent_id: str = "claude"
    tool: str = "pets.get"

    def view(self, expose_content: bool = True) -> dict[str, Any]:
        return {"id": self.id, "tool": self.tool, "agent_id": self.agent_id}


def approval(status: str = "pending", by: str = "", approval_id: str = "a1") -> FakeApproval:
    return FakeApproval(id=approval_id, status=status, resolved_by=by)


@dataclass
class Halt:
    id: str
    message: str


@dataclass
class Grant:
    id: str
    trace_id: str = ""


@dataclass
class Policies:
    decision: Decision = field(default_factory=lambda: Decision("allow", "agents", "allowed"))
    version: str = "v1"

    @property
    def current(self) -> Policies:
        return self

    @property
    def by_name(self) -> dict[str, Any]:
        return {}

    def decide(self, agent: str, tool_name: str, arguments: Any) -> Decision:
        return self.decision


@dataclass
class EffectiveSettings:
    timeout_seconds: float = 5.0
    wait_seconds: float = 0.0


class Fakes:
    """Every collaborator of the gate, each one configurable, and the GateDeps over them."""

    def __init__(self) -> None:
        self.log: list[str] = []  # what was consulted, in order
        self.halt: Halt | None = None
        self.lifecycle: Decision | None = None
        self.tools: dict[str, ToolDef] = {"pets.get": tool()}
        self.policies = Policies()
        self.limited = ""  # the check's refusal
        self.admit_refusal: str | None = None  # the release's refusal
        self.grant: Grant | None = None
        self.precedent: str | None = None
        self.pin_floor: Decision | None = None
        self.upstream: UpstreamResult | BaseException = UpstreamResult(result={"ok": True})
        # approvals
        self.resolution = approval("approved", "user:alice")
        self.claimable: FakeApproval | None = None
        self.denied: FakeApproval | None = None
        self.pending: FakeApproval | None = None
        self.submitted: list[dict[str, Any]] = []
        self.resolved: list[tuple[str, str, str]] = []
        self.settings = EffectiveSettings()

    # -- the collaborators, as GateDeps names them ------------------------------------------------------
    def active_for(self, agent: str, session: str) -> Halt | None:
        self.log.append("halt")
        return self.halt

    def floor(self, agent: str) -> Decision | None:
        self.log.append("lifecycle")
        return self.lifecycle

    def lookup(self, name: str) -> ToolDef | None:
        self.log.append("lookup")
        return self.tools.get(name)

    async def call(self, tool_def: ToolDef, arguments: Any, ctx: Any) -> UpstreamResult:
        self.log.append("upstream")
        if isinstance(self.upstream, BaseException):
            raise self.upstream
        return self.upstream

    def upstream_of(self, tool_def: ToolDef) -> tuple[str, str]:
        return ("pets", tool_def.source)

    def check(self, agent: str, policy: Any, tool_name: str, arguments: Any, *, count: bool) -> str:
        self.log.append(f"limits.check(count={count})")
        return self.limited

    def admit(self, agent: str, policy: Any, tool_name: str, arguments: Any, conn: Any = None) -> str | None:
        self.log.append("limits.admit")
        return self.admit_refusal

    def collect(self) -> None:
        pass

    def find(self, agent: str, tool_name: str) -> Grant | None:
        self.log.append("grant")
        return self.grant

    def floor_for(self, tool_def: ToolDef) -> Decision | None:
        return self.pin_floor

    async def precedent_check(self, agent: str, tool_def: Any, arguments: Any, trace_id: str, session: str) -> Any:
        self.log.append("precedents")
        return self.precedent

    # approvals
    def effective_settings(self) -> EffectiveSettings:
        return self.settings

    def submit(self, **kw: Any) -> FakeApproval:
        self.submitted.append(kw)
        queued = approval("pending", approval_id=f"a{len(self.submitted)}")
        if kw.get("also") is not None:
            kw["also"](None, queued)
        return queued

    async def wait(self, approval_id: str, timeout: float) -> Any:
        self.log.append("wait")
        return self.resolution

    async def wait_briefly(self, approval_id: str, seconds: float) -> Any:
        return None

    def claim_approved(self, agent: str, tool_name: str, arguments: Any, *, also: Any = None) -> Any:
        if self.claimable is not None and also is not None:
            also(None, self.claimable)
        return self.claimable

    def find_denied(self, agent: str, tool_name: str, arguments: Any) -> Any:
        return self.denied

    def find_pending(self, agent: str, tool_name: str, arguments: Any) -> Any:
        return self.pending

    def get(self, approval_id: str) -> Any:
        return approval("denied", "tty", approval_id)

    def resolve(self, approval_id: str, decision: str, *, resolved_by: str, resolver: str, reasoning: str) -> Any:
        self.resolved.append((approval_id, decision, resolved_by))
        return approval("approved" if decision == "approve" else "denied", resolved_by, approval_id)

    def deps(self) -> GateDeps:
        me = self

        class _Precedents:
            check = me.precedent_check

        class _Settings:
            class supervisor:
                expose_content = True

        return GateDeps(
            settings=_Settings(),
            registry=self,
            policies=self.policies,
            catalog=self,
            halts=self,
            limits=self,
            grants=self,
            pins=self,
            precedents=_Precedents(),
            approvals=self,
            tracer=None,
            metrics=None,
        )


class Recorder:
    """A CallRecorder that keeps what it would have written, in order."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.finals: list[Outcome] = []
        self.settled: list[Outcome] = []
        self.outcomes: list[Outcome] = []

    @staticmethod
    def write(call: Call, fn: Any) -> Any:
        return fn()

    def record_in(self, conn: Any, call: Call, out: Outcome, start: float, *, final: bool = False) -> int:
        self.log.append(f"trace {out.status}")
        return 7

    def finished(self, *args: Any, **kw: Any) -> None:
        pass

    async def final(self, call: Call, out: Outcome, start: float, *, grant: Any = None) -> None:
        self.log.append(f"final {out.status}")
        self.finals.append(out)

    def settle(
        self, call: Call, out: Outcome, resolved: Any, row_id: int, start: float, tool: Any, **kw: Any
    ) -> Outcome:
        self.log.append(f"settle {out.status} row {row_id}")
        self.settled.append(out)
        return out

    def approved_intent(self, call: Call, approval: Any, row_id: int, start: float) -> int:
        self.log.append(f"intent row {row_id}")
        return row_id

    def intent_in(self, conn: Any, call: Call, decision: Decision, start: float, approval: Any) -> int:
        self.log.append("intent in claim")
        return 9

    async def begin(self, call: Call, decision: Decision, start: float, grant: Any, limits: Any, policy: Any) -> Any:
        self.log.append(f"begin (counts: {limits is not None})")
        return 3, None

    async def outcome(self, row_id: int, call: Call, out: Outcome, *args: Any) -> None:
        self.log.append(f"outcome {out.status} row {row_id}")
        self.outcomes.append(out)
