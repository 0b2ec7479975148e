"""The agent loop: ask the model, run the tool calls it asks for through the mesh, give it the results, repeat
until it answers without a tool call (or `max_turns` runs out).

`async for event in agent.run("...")` streams `AgentEvent`s: `agent_start`, `text_delta`s as the model writes,
`tool_call_start` / `tool_call_complete` around each governed call, then `text_complete` and `agent_end` (or
`agent_error`). The conversation is kept between runs, so a REPL is a loop over `run`.

The model is offered the mesh's tools and, given a `Workspace`, the built-in tools (shared/agent/builtin_tools.py)
that run here, in the working directory. Every built-in call passes two gates before it runs: the local safety
layer (shared/agent/safety.py: refuse, ask the user, or allow), then the mesh (`POST /decide`: policy, halts,
grants, limits, approvals); it runs only when both allow, and what it did is reported back to the mesh so the
trace shows one call. A mesh tool goes through `POST /tool/{name}` as before. A tool name the model made up, or
arguments that do not fit the tool's schema, are answered with an error result without calling anything.

A shell command runs in the OS sandbox (shared/agent/sandbox.py), started once to see whether it can; where it
cannot, the run says so once and every command asks. A mesh that refuses the agent's credential stops the agent
(`stopped` says why): nothing runs ungoverned because a token was revoked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flux7.shared.agent import safety
from flux7.shared.agent.asked import AskedCalls
from flux7.shared.agent.builtin_tools import (
    BUILTINS,
    SUBAGENT_DEFAULT_TOOLS,
    SUBAGENT_PROMPT,
    Builtin,
    FileChange,
    HeadAndTail,
    ToolContext,
    ToolFailed,
    ToolRun,
    plan_change,
    validation_error,
)
from flux7.shared.agent.checkpoints import Checkpoints
from flux7.shared.agent.commands import reads_only
from flux7.shared.agent.context import Compaction, ContextEngine
from flux7.shared.agent.conversation import Message, ToolCall, ToolResult, ToolSpec, close_dangling
from flux7.shared.agent.cost import Prices
from flux7.shared.agent.events import AgentEvent
from flux7.shared.agent.hooks import Hooks
from flux7.shared.agent.llm import (
    Chat,
    Finished,
    LLMError,
    Retrying,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
)
from flux7.shared.agent.loop_detector import LoopDetector
from flux7.shared.agent.mesh_tools import (
    Decision,
    MeshCredentialRefused,
    MeshTool,
    MeshTools,
    MeshUnavailable,
    ToolOutcome,
)
from flux7.shared.agent.permissions import Permissions, suggested_rules
from flux7.shared.agent.sandbox import Sandbox
from flux7.shared.agent.sessions import Session, SessionError, SessionStore
from flux7.shared.tracecontext import new_trace_id

__all__ = ["DEFAULT_SYSTEM_PROMPT", "INTERRUPTED", "Agent", "Confirm", "Question", "Workspace"]

INTERRUPTED = "interrupted by the user"
_PLAN_INLINE = 256 * 1024  # bytes: a file this small has its write or edit computed without a thread


@dataclass(frozen=True)
class Question:
    """A call the local gate asks the user about."""

    tool: str
    arguments: dict[str, Any]
    why: str
    rules: list[str]  # the narrowest rules an "always" answer saves (this command, this path); [] when none
    diff: str = ""  # a write's or an edit's diff, shown before the question


# Asks the user: "yes", "no", "always" (save `rules`, then yes) or "tool" (always allow the tool, then yes).
Confirm = Callable[[Question], Awaitable[str]]


async def _nobody(_question: Question) -> str:
    return "no"  # nobody to ask: a call that needs a confirmation does not run (fail closed)


@dataclass
class _Turn:
    """One model turn as far as it got, for an interrupt to close it well formed and say what it stopped."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    tools_phase: bool = False  # the model's answer is in the conversation; its calls are running
    call: ToolCall | None = None  # the call in progress
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0  # when the call in progress started to run (0: not yet)
    trace_id: str = ""  # its trace in the mesh, once asked
    allowed: bool = False  # the mesh allowed it: its outcome is reported
    approval_id: str = ""
    agent_id: str = ""
    task: asyncio.Future[ToolRun] | None = None  # the call running in its own task
    interruptible: bool = True  # a shell command or a sub-agent stops; a file tool finishes first
    output: HeadAndTail | None = None  # what a command printed so far
    closed: bool = False


@dataclass
class Workspace:
    """Where and how the built-in tools run."""

    cwd: Path
    home: Path
    mode: str = "on-request"
    offline: bool = False  # the user chose to run without the mesh: calls are not governed nor traced
    confirm: Confirm = _nobody
    tools: ToolContext = field(default_factory=ToolContext)
    sandbox: Sandbox | None = None  # the shell's sandbox; None: there is none, every command asks
    network: bool = False  # sandbox.network: sandboxed commands may use the network (not in read-only mode)
    # why the sandbox cannot start ("" when it can; None: not tried yet)
    _sandbox_error: str | None = field(default=None, init=False, repr=False)

    async def sandboxed(self) -> tuple[bool, str]:
        """Whether shell commands run in the sandbox, and, the first time they cannot, the sentence saying so."""
        if self._sandbox_error is not None:
            return not self._sandbox_error, ""
        self._sandbox_error = await self.sandbox.probe() if self.sandbox is not None else "no sandbox configured"
        if not self._sandbox_error:
            return True, ""
        return False, f"no sandbox for shell commands ({self._sandbox_error}): every shell command asks first"

    def context(self, *, sandboxed: bool, confirmed: bool) -> ToolContext:
        """The context one call runs with: the sandbox when it starts, the folder read-only in read-only mode,
        the network for a command the user confirmed, in yolo mode, or with sandbox.network."""
        writable = self.mode != "read-only"
        network = writable and (confirmed or self.mode == "yolo" or self.network)
        sandbox = self.sandbox if sandboxed else None
        return dataclasses.replace(self.tools, sandbox=sandbox, writable=writable, network=network)


DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant working in a terminal. You can use tools; every tool call goes through a "
    "governance mesh that may allow it, refuse it, or hold it for a human's approval. When a tool call is "
    "refused, do not try to get around the refusal: say what was refused and why."
)


class Agent:
    def __init__(
        self,
        chat: Chat,
        mesh: MeshTools,
        *,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_turns: int = 20,
        keep_messages: int = 200,
        wait_notice: float = 2.0,
        workspace: Workspace | None = None,
        store: SessionStore | None = None,
        session: Session | None = None,
        hooks: Hooks | None = None,
        loop_repeats: int = 3,
        context: ContextEngine | None = None,
        custom_tools: Sequence[Builtin] = (),
        permissions: Permissions | None = None,
        asked: AskedCalls | None = None,
        prices: Prices | None = None,
        provider: str = "",
    ) -> None:
        self.chat = chat
        self.context = context
        self.hooks = hooks
        self.loops = LoopDetector(loop_repeats)
        self.mesh = mesh
        self.workspace = workspace
        self.store = store
        self.session = session
        self.system_prompt = system_prompt
        self.max_turns = max(1, max_turns)
        self.keep_messages = max(2, keep_messages)
        self.wait_notice = wait_notice  # seconds without an answer before saying the call is waiting
        self.messages: list[Message] = session.messages if session is not None else []
        self.tools: list[MeshTool] | None = None
        self.usage = session.usage if session is not None else {"input_tokens": 0, "output_tokens": 0}
        self._builtin_specs: dict[str, Builtin] = dict(BUILTINS) if workspace is not None else {}
        if workspace is not None:  # custom tools run here, like the built-ins, through the same gates
            self._builtin_specs.update({t.name: t for t in custom_tools})
        self.permissions = permissions
        self.asked = asked
        self.prices = prices or Prices()
        self.provider = provider or (session.provider if session is not None else "")
        self.stopped = ""  # why the agent cannot go on (the mesh refused its credential); "" while it can
        self.cost_prompt: float | None = None  # the last prompt's cost in US dollars (None: the price is unknown)
        self.note = ""  # said to the model before the next prompt (files the user put back with /undo)
        self._unsaved = ""  # why the last save failed, until it is said
        self._reports: set[asyncio.Future[Any]] = set()  # outcome reports still on their way to the mesh
        self._writing: asyncio.Future[None] | None = None  # the session's last save, until it is written
        self._task: asyncio.Task[Any] | None = None  # the task running `run`, which an interrupt cancels
        self._running = False
        self._interrupt_pending = False  # asked for, not yet taken by the run
        self._interrupt_taken = False  # the run is closing after an interrupt: further ones wait for the prompt
        self._turn = _Turn(closed=True)

    @property
    def checkpoints(self) -> Checkpoints | None:
        if self.store is None or self.session is None:
            return None
        return Checkpoints(self.store.folder / f"{self.session.id}.checkpoints", self.session.checkpoints)

    def add_tools(self, tools: Sequence[Builtin]) -> None:
        """More tools that run on this side of the mesh (an MCP server's), through the same gates."""
        if self.workspace is not None:
            self._builtin_specs.update({t.name: t for t in tools if t.name not in self._builtin_specs})

    def switch(self, session: Session) -> None:
        """Continue `session` from here: its conversation, usage and mesh session id."""
        self.session = session
        self.messages = session.messages
        close_dangling(self.messages)
        self.usage = session.usage
        self.mesh.set_session(session.id)
        if self.hooks is not None:
            self.hooks.session_id = session.id

    def interrupt(self) -> bool:
        """End the current run now (the user pressed Ctrl-C or Esc): a command is killed, a call not yet run is
        not run, the model's answer stops where it is; the run then ends with `agent_interrupted`. False when no
        run is going (or it is closing after an interrupt already)."""
        if not self._running or self._task is None or self._interrupt_pending or self._interrupt_taken:
            return False
        self._interrupt_pending = True
        self._task.cancel()
        return True

    def _take_interrupt(self) -> bool:
        """Whether the cancellation being handled is the user's interrupt (then it is taken: the run goes on to
        close itself); False for any other cancellation, which must go on."""
        if not self._interrupt_pending:
            return False
        self._interrupt_pending, self._interrupt_taken = False, True
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True

    async def compact(self) -> Compaction | None:
        """`/compact`: the whole conversation so far replaced by the model's summary of it."""
        if self.context is None or not self.messages:
            return None
        done = await self.context.compact(
            self.chat, self.messages, len(self.messages), self.system_prompt, self.specs(), force=True
        )
        self._save()
        return done

    def clear(self) -> None:
        self.messages.clear()
        self._save()

    def _save(self) -> None:
        """Save the session as it is now. The snapshot is taken here; the file is written in a thread, one write
        after another, beside the model's turn (a run waits for the last one before it ends). A save that fails
        does not stop the run: the next event says so."""
        if self.store is None or self.session is None:
            return
        store, session_id, data = self.store, self.session.id, self.store.encode(self.session)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (a caller outside the agent's runs): write now
            self._write(store, session_id, data)
            return
        previous = self._writing

        async def write() -> None:
            if previous is not None:
                await previous
            await asyncio.to_thread(self._write, store, session_id, data)

        self._writing = asyncio.ensure_future(write())

    def _write(self, store: SessionStore, session_id: str, data: bytes) -> None:
        try:
            store.write(session_id, data)
        except SessionError as e:
            self._unsaved = str(e)

    async def flush(self) -> None:
        """Wait until the session's last save is on disk."""
        if self._writing is not None:
            await self._writing
            self._writing = None

    async def refresh_tools(self) -> list[MeshTool]:
        if self.workspace is not None and self.workspace.offline:
            self.tools = []  # offline: the mesh is not asked, its tools are not offered
            return self.tools
        tools = await self.mesh.list()
        # A built-in keeps its name; a mesh tool of the same name is not offered (the mesh's policy for that name
        # applies to the built-in, which /decide asks about under it).
        self.tools = [t for t in tools if t.spec.name not in self._builtin_specs]
        return self.tools

    def specs(self) -> list[ToolSpec]:
        builtins = [ToolSpec(b.name, b.description, b.parameters) for b in self._builtin_specs.values()]
        return builtins + [t.spec for t in self.tools or []]

    async def run(self, prompt: str) -> AsyncIterator[AgentEvent]:
        self._task = asyncio.current_task()
        self._running = True
        try:
            try:
                async for event in self._events(prompt):
                    yield event
            except asyncio.CancelledError:
                if not self._take_interrupt():
                    raise
                # Interrupted outside the turn's own handling (a hook was running): close what is left open.
                async for event in self._interrupted(self._turn):
                    yield event
        finally:
            self._running = False
            self._interrupt_pending = self._interrupt_taken = False
            if self._reports:  # the run is not over until the mesh has every outcome
                await asyncio.gather(*self._reports, return_exceptions=True)
                self._reports.clear()
            await self.flush()  # nor until the session is saved

    async def _events(self, prompt: str) -> AsyncIterator[AgentEvent]:
        async for event in self._run(prompt):
            if self._unsaved:
                yield AgentEvent("notice", text=f"the session is not saved: {self._unsaved}")
                self._unsaved = ""
            yield event
            hook = _HOOK_OF.get(event.type)
            if hook is not None and self.hooks is not None and self.hooks.has(hook):
                fired = await self.hooks.fire(hook, _hook_payload(event))
                for problem in fired.problems:
                    yield AgentEvent("notice", text=problem)

    async def _before_tool(self, tool: str, arguments: dict[str, Any]) -> tuple[str, list[str]]:
        """Why a before_tool hook blocks this call ("" when none does), and the hooks' problems to tell."""
        if self.hooks is None or not self.hooks.has("before_tool"):
            return "", []
        fired = await self.hooks.fire("before_tool", {"tool": tool, "arguments": arguments})
        return (fired.reason if fired.blocked else ""), fired.problems

    def _add_usage(self, usage: dict[str, int]) -> None:
        for k, v in usage.items():
            self.usage[k] = self.usage.get(k, 0) + v
        cost = self.prices.cost(self.provider, self.chat.model, usage)
        if cost is None:
            return
        self.cost_prompt = (self.cost_prompt or 0.0) + cost
        if self.session is not None:
            self.session.cost_usd += cost

    def _cost(self) -> dict[str, float]:
        if self.cost_prompt is None:
            return {}
        return {"prompt": self.cost_prompt, "session": self.session.cost_usd if self.session else self.cost_prompt}

    async def _run(self, prompt: str) -> AsyncIterator[AgentEvent]:
        yield AgentEvent("agent_start", text=prompt)
        if self.stopped:
            yield AgentEvent("agent_error", text=self.stopped, is_error=True)
            return
        if self.tools is None:
            try:
                await self.refresh_tools()
            except MeshCredentialRefused as e:
                self.stopped = _credential_stop(e)
                yield AgentEvent("agent_error", text=self.stopped, is_error=True)
                return
            except MeshUnavailable as e:
                if self.workspace is None:
                    yield AgentEvent("agent_error", text=f"cannot list the mesh's tools: {e}", is_error=True)
                    return
                # The built-ins stay: reads run untraced, anything that changes things is refused (fail closed).
                yield AgentEvent("notice", text=f"the mesh is unreachable ({e}): changes are refused until it is back")
        close_dangling(self.messages)  # a call left without its result (the agent died): answered as not run
        start = len(self.messages)
        self.loops.reset()
        self.cost_prompt = None
        if self.session is not None:
            self.session.prompts += 1
        if self.note:
            prompt, self.note = f"({self.note})\n\n{prompt}", ""
        self.messages.append(Message("user", prompt))
        self._save()
        specs = self.specs()
        turn = self._turn = _Turn()
        try:
            for _ in range(self.max_turns):
                turn = self._turn = _Turn()
                self._trim()
                if self.context is not None and self.context.over(self.messages, self.system_prompt, specs):
                    try:
                        fitted = await self.context.fit(self.chat, self.messages, start, self.system_prompt, specs)
                    except LLMError as e:
                        fitted = None
                        yield AgentEvent("notice", text=f"compaction failed, going on without it: {e}")
                    if fitted is not None:
                        compacted, start = fitted
                        self._save()
                        yield AgentEvent("notice", text=_compacted(compacted))
                streamed: dict[int, str] = {}  # a streamed call's index -> its id
                try:
                    async for piece in self.chat.stream(self.system_prompt, self.messages, specs):
                        if isinstance(piece, TextDelta):
                            turn.text.append(piece.text)
                            yield AgentEvent("text_delta", text=piece.text)
                        elif isinstance(piece, ToolCallStart):
                            streamed[piece.index] = piece.id
                            yield AgentEvent("tool_call_streaming", tool=piece.name, call_id=piece.id)
                        elif isinstance(piece, ToolCallDelta):
                            call_id = streamed.get(piece.index, str(piece.index))
                            yield AgentEvent("tool_call_delta", text=piece.arguments, call_id=call_id)
                        elif isinstance(piece, ToolCallDone):
                            turn.calls.append(piece.call)
                        elif isinstance(piece, Finished):
                            self._add_usage(piece.usage)
                        elif isinstance(piece, Retrying):
                            yield AgentEvent("notice", text=_retrying(piece))
                except LLMError as e:
                    # The next prompt starts from before this run (calls it already made stay in the mesh's traces).
                    del self.messages[start:]
                    self._save()
                    yield AgentEvent("agent_error", text=str(e), is_error=True)
                    return
                text, calls = "".join(turn.text), turn.calls
                self.messages.append(Message("assistant", text, tool_calls=calls))
                turn.tools_phase = True
                looping = self.loops.check(text, calls)
                if looping:
                    # Nothing of this turn runs; the conversation stays well formed for the next prompt.
                    skipped = [ToolResult(c.id, f"not run: {looping}", True) for c in calls]
                    if skipped:
                        self.messages.append(Message("tool", results=skipped))
                    self.messages.append(Message("assistant", f"(stopped: {looping})"))
                    self._save()
                    turn.closed = True
                    yield AgentEvent("agent_error", text=f"stopped: {looping}", is_error=True)
                    return
                self._save()
                if not calls:
                    turn.closed = True
                    yield AgentEvent("text_complete", text=text)
                    yield AgentEvent("agent_end", usage=dict(self.usage), cost=self._cost())
                    return
                results = turn.results
                try:
                    for call in calls:
                        turn.call, turn.started, turn.trace_id, turn.allowed = call, 0.0, "", False
                        turn.task, turn.output, turn.interruptible = None, None, True
                        async for event in self._run_call(call, results):
                            yield event
                        turn.call = None
                except MeshCredentialRefused as e:
                    self.stopped = _credential_stop(e)
                    done = {r.call_id for r in results}
                    results += [ToolResult(c.id, "not run: the agent stopped", True) for c in calls if c.id not in done]
                    self.messages.append(Message("tool", results=results))
                    self._save()
                    turn.closed = True
                    yield AgentEvent("agent_error", text=self.stopped, is_error=True)
                    return
                self.messages.append(Message("tool", results=results))
                turn.closed = True
                self._save()
        except asyncio.CancelledError:
            if not self._take_interrupt():
                if turn.task is not None and turn.interruptible:  # a sub-agent's command, its parent interrupted
                    turn.task.cancel()
                raise
            async for event in self._interrupted(turn):
                yield event
            return
        stopped = f"stopped after {self.max_turns} model turns"
        self.messages.append(Message("assistant", f"({stopped})"))  # the conversation stays well formed
        self._save()
        yield AgentEvent("agent_error", text=stopped, is_error=True)

    async def _interrupted(self, turn: _Turn) -> AsyncIterator[AgentEvent]:
        """Close the turn the user interrupted: the command killed (a file tool finishes first), the call in
        progress answered as interrupted (to the model and, with its real duration, to the mesh's trail), the
        calls after it as not run, the conversation well formed; then `agent_interrupted`."""
        if turn.closed:
            close_dangling(self.messages, f"not run: {INTERRUPTED}")
            self._save()
            yield AgentEvent("agent_interrupted", text=INTERRUPTED)
            return
        turn.closed = True
        if not turn.tools_phase:
            text = "".join(turn.text)
            self.messages.append(Message("assistant", (text + "\n\n" if text else "") + f"[{INTERRUPTED}]"))
        else:
            answered = {r.call_id for r in turn.results}
            call = turn.call
            if call is not None and call.id not in answered:
                async for event in self._interrupted_call(turn, call):
                    yield event
            done = {r.call_id for r in turn.results}
            for c in turn.calls:
                if c.id not in done:
                    turn.results.append(ToolResult(c.id, f"not run: {INTERRUPTED}", True))
            self.messages.append(Message("tool", results=turn.results))
            self.messages.append(Message("assistant", f"({INTERRUPTED})"))
        self._save()
        yield AgentEvent("agent_interrupted", text=INTERRUPTED, usage=dict(self.usage), cost=self._cost())

    async def _interrupted_call(self, turn: _Turn, call: ToolCall) -> AsyncIterator[AgentEvent]:
        elapsed = time.perf_counter() - turn.started if turn.started else 0.0
        run: ToolRun | None = None
        if turn.task is not None:
            if turn.interruptible:
                turn.task.cancel()
            try:
                run = await turn.task  # a file tool finishes; a command is killed (its CancelledError)
            except asyncio.CancelledError:
                run = None
            except Exception as e:  # the tool's own failure, now moot
                run = ToolRun(f"error: {e}", is_error=True)
        if run is not None:  # it ran to its end: an ordinary result
            yield self._ran(turn, call, run, (time.perf_counter() - turn.started) * 1000)
            return
        shown = turn.tool or call.name
        if turn.started:
            what = f"{INTERRUPTED} after {elapsed:.1f} s" + (": the command was killed" if shown == "shell" else "")
            printed = f"; its output until then:\n{turn.output.text()}" if turn.output and turn.output.total else ""
            content, policy = f"error: {what}{printed}", "interrupted"
            if turn.trace_id and turn.allowed:
                self._report(
                    turn, ok=False, size=turn.output.total if turn.output else 0, ms=elapsed * 1000, error=what
                )
        else:
            content, policy = f"not run: {INTERRUPTED}", "interrupted"
            if turn.trace_id and self.asked is not None:
                self.asked.abandoned(turn.trace_id, f"not run: {INTERRUPTED}")
                self._reports.add(asyncio.ensure_future(self.asked.settle(self.mesh, {turn.trace_id})))
        turn.results.append(ToolResult(call.id, content, True))
        done = AgentEvent(
            "tool_call_complete",
            text=content,
            tool=shown,
            call_id=call.id,
            arguments=turn.arguments,
            policy=policy,
            gate="mesh" if turn.trace_id else "local",
            trace_id=turn.trace_id if turn.allowed else "",
            is_error=True,
        )
        self._log(done)
        yield done

    def _report(self, turn: _Turn, *, ok: bool, size: int, ms: float, error: str, exit_code: int | None = None) -> None:
        """Send the call's outcome beside what comes next (the run waits for it before it ends)."""
        trace_id, agent_id = turn.trace_id, turn.agent_id
        asked = self.asked

        async def report() -> None:
            try:
                await self.mesh.report(
                    trace_id, ok=ok, exit_code=exit_code, size=size, duration_ms=ms, error=error, agent_id=agent_id
                )
            finally:
                if asked is not None:
                    asked.done(trace_id)  # it ran: whatever the mesh answered, it is not a call that never ran

        self._reports.add(asyncio.ensure_future(report()))

    def _ran(self, turn: _Turn, call: ToolCall, run: ToolRun, elapsed_ms: float) -> AgentEvent:
        """A call that ran: its outcome reported, its change checkpointed, its result for the model."""
        if turn.trace_id and turn.allowed:
            error = run.content[:500] if run.is_error else ""
            self._report(
                turn,
                ok=not run.is_error,
                size=len(run.content.encode()),
                ms=elapsed_ms,
                error=error,
                exit_code=run.exit_code,
            )
        if run.change is not None:
            self._checkpoint(turn.tool, run.change)
        ws = self.workspace
        offline = ws is not None and ws.offline
        if not turn.trace_id or not turn.allowed:
            policy, gate = ("offline", "offline") if offline else ("ungoverned", "local")
        else:
            policy, gate = ("human_approval" if turn.approval_id else "allow"), "mesh"
        turn.results.append(ToolResult(call.id, run.content, run.is_error))
        done = AgentEvent(
            "tool_call_complete",
            text=run.content,
            tool=turn.tool,
            call_id=call.id,
            arguments=turn.arguments,
            policy=policy,
            gate=gate,
            is_error=run.is_error,
            trace_id=turn.trace_id if turn.allowed else "",
            approval_id=turn.approval_id,
            diff=run.diff,
            exit_code=run.exit_code,
        )
        self._log(done)
        return done

    def _checkpoint(self, tool: str, change: FileChange) -> None:
        points = self.checkpoints
        if points is None or self.session is None:
            return
        prompt = next((m.text for m in reversed(self.messages) if m.role == "user"), "")
        blobs = points.record(self.session.prompts, prompt, tool, change)

        async def write() -> None:  # beside what comes next; the run waits for it before it ends
            try:
                await asyncio.to_thread(points.write, blobs)
            except OSError as e:
                self._unsaved = f"the checkpoint of {change.shown} could not be saved: {e}"

        if blobs:
            self._reports.add(asyncio.ensure_future(write()))

    async def _run_call(self, call: ToolCall, results: list[ToolResult]) -> AsyncIterator[AgentEvent]:
        builtin = self._builtin_specs.get(call.name)
        if builtin is not None:
            async for event in self._run_builtin(builtin, call, results):
                yield event
            return
        name = self.mesh.mesh_name(call.name)
        arguments = _arguments(call.arguments)
        shown = name or call.name
        self._turn.tool, self._turn.arguments = shown, arguments or {}
        yield AgentEvent("tool_call_start", tool=shown, call_id=call.id, arguments=arguments or {})
        gate = "mesh"
        if name is None:
            outcome, gate = ToolOutcome(f"error: there is no tool named {call.name!r}", True, "error", 0), ""
        elif arguments is None:
            outcome = ToolOutcome("error: the arguments must be a JSON object; nothing was called", True, "error", 0)
            gate = ""
        elif (blocked := await self._before_tool(name, arguments))[0]:
            outcome, gate = ToolOutcome(f"refused by a before_tool hook: {blocked[0]}", True, "refused", 0), "hook"
        else:
            for problem in blocked[1]:
                yield AgentEvent("notice", text=problem)
            # Gate 1, locally: the approval mode and the user's rules (the mesh's policy, approvals and limits are
            # gate 2).
            mode = self.workspace.mode if self.workspace is not None else "on-request"
            local = safety.check_mesh_tool(name, self.mesh.access(name), mode)
            cwd = self.workspace.cwd if self.workspace is not None else Path(".")
            rule = self.permissions.decide(name, arguments, cwd) if self.permissions is not None else None
            confirmed = local.action == "allow"
            if rule is not None and rule.action == "deny" and local.action != "refuse":
                local, confirmed = safety.Verdict("refuse", _denied_by(rule)), False
            elif local.action == "ask" and rule is not None:
                confirmed = True
            elif local.action == "ask":
                yield AgentEvent(
                    "tool_call_confirm",
                    tool=name,
                    call_id=call.id,
                    arguments=arguments,
                    text=local.reason,
                    rules=[name],
                )
                answer = await self._ask(Question(name, arguments, local.reason, [name]))
                for said in answer[1]:
                    yield AgentEvent("notice", text=said)
                confirmed = answer[0]
            if not confirmed:
                why = local.reason if local.action == "refuse" else f"the user did not confirm it ({local.reason})"
                outcome, gate = ToolOutcome(f"refused: {why}. Tell the user.", True, "refused", 0), "local"
            else:
                pending = asyncio.ensure_future(self.mesh.call(name, arguments))
                try:
                    done, _ = await asyncio.wait({pending}, timeout=self.wait_notice)
                    if not done:  # most likely held for a human's approval: say so, and which one when visible
                        approval = await self.mesh.pending_approval(name)
                        yield AgentEvent(
                            "tool_call_waiting",
                            tool=shown,
                            call_id=call.id,
                            approval_id=approval,
                            text=self.mesh.approval_hint(approval),
                        )
                    outcome = await pending
                finally:
                    if not pending.done():  # the run was abandoned: do not leave the request behind
                        pending.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await pending
        results.append(ToolResult(call.id, outcome.content, outcome.is_error))
        complete = AgentEvent(
            "tool_call_complete",
            text=outcome.content,
            tool=shown,
            call_id=call.id,
            arguments=arguments or {},
            policy=outcome.policy,
            trace_id=outcome.trace_id,
            approval_id=outcome.approval_id,
            is_error=outcome.is_error,
            gate=gate,
        )
        self._log(complete)
        yield complete

    async def _ask(self, question: Question) -> tuple[bool, list[str]]:
        """The user's answer (yes?) and what an "always" answer saved, to say."""
        ws = self.workspace
        answer = await ws.confirm(question) if ws is not None else "no"
        said: list[str] = []
        if answer in ("always", "tool") and self.permissions is not None:
            rules = question.rules if answer == "always" and question.rules else [question.tool]
            try:
                added = self.permissions.add("allow", rules)
                where = added[0].source if added else ""
                said.append(f"saved allow {', '.join(r.text for r in added)} in {where} (/permissions lists them)")
            except (OSError, ValueError) as e:
                said.append(f"the rule could not be saved ({e}); allowed this once")
        return answer in ("yes", "always", "tool"), said

    def _log(self, done: AgentEvent) -> None:
        if self.session is not None:
            self.session.tool_calls.append(
                {
                    "tool": done.tool,
                    "arguments": done.arguments,
                    "gate": done.gate,
                    "policy": done.policy,
                    "trace_id": done.trace_id,
                    "approval_id": done.approval_id,
                    "is_error": done.is_error,
                    "exit_code": done.exit_code,
                }
            )

    async def _run_builtin(self, tool: Builtin, call: ToolCall, results: list[ToolResult]) -> AsyncIterator[AgentEvent]:
        """Validate, the local gate, the mesh gate, run, report: the built-in call's whole life."""
        ws = self.workspace
        assert ws is not None  # built-ins are offered only with a workspace
        turn = self._turn
        arguments = _arguments(call.arguments)
        turn.tool, turn.arguments, turn.agent_id = tool.mesh_name, arguments or {}, self.mesh.agent_id
        yield AgentEvent("tool_call_start", tool=tool.mesh_name, call_id=call.id, arguments=arguments or {})

        def finish(text: str, policy: str, gate: str, *, error: bool, **kw: Any) -> AgentEvent:
            results.append(ToolResult(call.id, text, error))
            done = AgentEvent(
                "tool_call_complete",
                text=text,
                tool=tool.mesh_name,
                call_id=call.id,
                arguments=arguments or {},
                policy=policy,
                gate=gate,
                is_error=error,
                **kw,
            )
            self._log(done)
            return done

        if arguments is None:
            yield finish("error: the arguments must be a JSON object; nothing was called", "error", "", error=True)
            return
        invalid = validation_error(tool.parameters, arguments)
        if invalid:
            why = f"error: invalid arguments for {tool.mesh_name}: {invalid}; nothing was called"
            yield finish(why, "error", "", error=True)
            return
        blocked, problems = await self._before_tool(tool.mesh_name, arguments)
        for problem in problems:
            yield AgentEvent("notice", text=problem)
        if blocked:
            yield finish(f"refused by a before_tool hook: {blocked}", "refused", "hook", error=True)
            return
        # Gate 1: the local safety layer, then the user's rules. A refusal never reaches the mesh.
        is_shell = tool.mesh_name == "shell" and tool.run is BUILTINS["shell"].run
        sandboxed = False
        if is_shell:
            sandboxed, said = await ws.sandboxed()
            if said:
                yield AgentEvent("notice", text=said)
        verdict = safety.check(
            tool.mesh_name,
            arguments,
            mutating=tool.mutating,
            mode=ws.mode,
            cwd=ws.cwd,
            home=ws.home,
            hidden=ws.tools.hidden,
            env=ws.tools.env,
            sandboxed=sandboxed,
        )
        if verdict.action == "refuse":
            yield finish(f"refused: {verdict.reason}. Do not retry; tell the user.", "refused", "local", error=True)
            return
        rule = self.permissions.decide(tool.mesh_name, arguments, ws.cwd) if self.permissions is not None else None
        if rule is not None and rule.action == "deny":
            yield finish(f"refused: {_denied_by(rule)}. Do not retry; tell the user.", "refused", "local", error=True)
            return
        # A write or an edit is computed first: its diff is shown before the question and sent to the mesh.
        change: FileChange | None = None
        if tool.run in (BUILTINS["write_file"].run, BUILTINS["edit_file"].run):
            try:
                target = ws.cwd / Path(str(arguments["path"])).expanduser()
                small = not target.exists() or target.stat().st_size <= _PLAN_INLINE
                # A small file's diff costs less than a thread's round trip (the bench's edit_file call).
                plan = functools.partial(plan_change, tool.name, arguments, ws.cwd)
                change = plan() if small else await asyncio.to_thread(plan)
            except (ToolFailed, OSError) as e:
                failed = str(e) if isinstance(e, ToolFailed) else str(e.strerror or e)
                yield finish(f"error: {failed}; nothing was written", "error", "", error=True)
                return
        confirmed = False
        if verdict.action == "ask" and (rule is None or verdict.firm):
            always = (
                suggested_rules(tool.mesh_name, arguments, ws.cwd, self.permissions.root) if self.permissions else []
            )
            diff = change.diff if change is not None else ""
            yield AgentEvent(
                "tool_call_confirm",
                tool=tool.mesh_name,
                call_id=call.id,
                arguments=arguments,
                text=verdict.reason,
                diff=diff,
                rules=always,
            )
            yes, notes = await self._ask(Question(tool.mesh_name, arguments, verdict.reason, always, diff))
            for saved in notes:
                yield AgentEvent("notice", text=saved)
            if not yes:
                why = f"refused: the user did not confirm it ({verdict.reason}). Ask the user how to proceed."
                yield finish(why, "refused", "local", error=True)
                return
            confirmed = True
        if ws.offline and tool.needs_mesh:
            why = f"refused: {tool.mesh_name} runs only when the mesh allows it, and the agent is offline"
            yield finish(why + ". Tell the user.", "refused", "local", error=True)
            return
        # Gate 2: the mesh. Its approvals are resolved only in the mesh, never by the confirmation above.
        decision: Decision | None = None
        if not ws.offline:
            trace_id = turn.trace_id = new_trace_id()
            if self.asked is not None:
                session_id = self.mesh.session_id
                self.asked.asked(trace_id, tool=tool.mesh_name, agent_id=self.mesh.agent_id, session_id=session_id)
            preview = change.preview(ws.cwd) if change is not None else None
            pending = asyncio.ensure_future(
                self.mesh.decide(tool.mesh_name, arguments, trace_id=trace_id, preview=preview)
            )
            try:
                done, _ = await asyncio.wait({pending}, timeout=self.wait_notice)
                if not done:  # held for a human's approval in the mesh: say so, and which one when visible
                    approval = await self.mesh.pending_approval(tool.mesh_name)
                    yield AgentEvent(
                        "tool_call_waiting",
                        tool=tool.mesh_name,
                        call_id=call.id,
                        approval_id=approval,
                        text=self.mesh.approval_hint(approval),
                    )
                decision = await pending
            except MeshUnavailable as e:
                if self.asked is not None:
                    self.asked.done(trace_id)
                turn.trace_id = ""
                command = str(arguments.get("command") or "")
                reads = is_shell and reads_only(command, cwd=ws.cwd, home=ws.home, hidden=ws.tools.hidden)
                changes = tool.mutating and not reads
                if changes or tool.needs_mesh:
                    what = "it" if tool.needs_mesh else "nothing that changes things"
                    why = f"refused: the mesh cannot be asked ({e}); {what} runs without it"
                    yield finish(why + " (fail closed). Tell the user.", "error", "mesh", error=True)
                    return
                decision = None  # a read: it runs, untraced, and the terminal says so
            finally:
                if not pending.done():
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, MeshUnavailable):
                        await pending
            if decision is not None:
                turn.trace_id = decision.trace_id or trace_id
                turn.approval_id = decision.approval_id
            if decision is not None and decision.action != "allow":
                if self.asked is not None:
                    self.asked.done(trace_id)
                yield finish(
                    _mesh_refusal(decision),
                    "human_approval" if decision.approval_id else decision.action,
                    "mesh",
                    error=True,
                    trace_id=decision.trace_id,
                    approval_id=decision.approval_id,
                )
                return
            if decision is not None:
                turn.allowed = True
                if self.asked is not None:
                    self.asked.asked(
                        turn.trace_id,
                        tool=tool.mesh_name,
                        agent_id=self.mesh.agent_id,
                        session_id=self.mesh.session_id,
                        state="running",
                    )
        ctx = ws.context(sandboxed=sandboxed, confirmed=confirmed)
        if change is not None:
            ctx = dataclasses.replace(ctx, planned=change)
        turn.started = time.perf_counter()
        if tool.mesh_name == "task" and tool.run is BUILTINS["task"].run:
            # A sub-agent: its calls pass both gates themselves, shown as they happen.
            outcome: list[ToolRun] = []
            async for event in self._subagent(arguments, outcome):
                yield event
            run = outcome[0]
        elif is_shell:  # its output shown as it comes
            async for event in self._streamed(tool, arguments, ctx, call):
                yield event
            assert turn.task is not None
            run = turn.task.result()
        else:
            turn.interruptible = bool(tool.governed_as)  # an MCP server's call stops; a file tool finishes first
            turn.task = asyncio.ensure_future(tool.run(arguments, ws.cwd, ctx))
            run = await (turn.task if turn.interruptible else asyncio.shield(turn.task))
        yield self._ran(turn, call, run, (time.perf_counter() - turn.started) * 1000)

    async def _streamed(
        self, tool: Builtin, arguments: dict[str, Any], ctx: ToolContext, call: ToolCall
    ) -> AsyncIterator[AgentEvent]:
        """Run a command in its own task, passing its output on as `tool_call_output` events as it comes."""
        ws = self.workspace
        assert ws is not None
        turn = self._turn
        chunks: asyncio.Queue[str] = asyncio.Queue(maxsize=8)  # bounded: a slow screen slows the command down
        turn.output = HeadAndTail(ctx.output_limit)
        task = turn.task = asyncio.ensure_future(
            tool.run(arguments, ws.cwd, dataclasses.replace(ctx, output=chunks.put))
        )
        while True:
            getter = asyncio.ensure_future(chunks.get())
            try:
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                text = getter.result()
            elif not chunks.empty():
                text = chunks.get_nowait()
            else:
                return
            turn.output.add(text)
            yield AgentEvent("tool_call_output", tool=tool.mesh_name, call_id=call.id, text=text)

    async def _subagent(self, arguments: dict[str, Any], outcome: list[ToolRun]) -> AsyncIterator[AgentEvent]:
        """Run a child agent with its own conversation and a narrowed tool set, as `<agent>/<name>` in the mesh;
        its final answer (or why it stopped) is the task's result."""
        ws = self.workspace
        assert ws is not None
        name = arguments["name"]
        allowed = arguments.get("tools") or list(SUBAGENT_DEFAULT_TOOLS)
        unknown = [t for t in allowed if t not in self._builtin_specs or t == "task"]
        if unknown:
            outcome.append(ToolRun(f"error: a sub-agent cannot have {', '.join(unknown)}", is_error=True))
            return
        mesh = self.mesh.child(name)
        child = Agent(
            self.chat,
            mesh,
            system_prompt=SUBAGENT_PROMPT.format(name=name, cwd=ws.cwd),
            max_turns=self.max_turns,
            wait_notice=self.wait_notice,
            workspace=ws,
            hooks=self.hooks,
            custom_tools=[t for n, t in self._builtin_specs.items() if n not in BUILTINS],
        )
        child._builtin_specs = {n: t for n, t in child._builtin_specs.items() if n in allowed}
        child.tools = []  # built-in and custom tools only: the mesh's tools stay with the parent
        answer, error = "", ""
        try:
            async for event in child.run(arguments["prompt"]):
                if event.type.startswith("tool_call_") and event.type not in ("tool_call_streaming", "tool_call_delta"):
                    yield dataclasses.replace(event, tool=f"{name}/{event.tool}")
                elif event.type == "notice":
                    yield event
                elif event.type == "text_complete":
                    answer = event.text
                elif event.type == "agent_error":
                    error = event.text
                elif event.type == "agent_end":
                    for k, v in event.usage.items():
                        self.usage[k] = self.usage.get(k, 0) + v
        finally:
            await mesh.aclose()
        if child.stopped:  # the mesh refused the credential: the parent stops too
            raise MeshCredentialRefused(child.stopped)
        if error:
            outcome.append(ToolRun(f"error: the sub-agent {name} stopped: {error}", is_error=True))
        else:
            outcome.append(ToolRun(answer or "(the sub-agent answered nothing)"))

    def _trim(self) -> None:
        """Keep the conversation bounded: drop the oldest exchanges, never splitting a tool call from its result."""
        while len(self.messages) > self.keep_messages:
            del self.messages[0]
            while self.messages and self.messages[0].role != "user":
                del self.messages[0]


_HOOK_OF = {
    "agent_start": "user_prompt",
    "tool_call_complete": "after_tool",
    "agent_end": "agent_end",
    "agent_error": "error",
}


def _hook_payload(event: AgentEvent) -> dict[str, Any]:
    """What a hook reads on stdin besides the event's name, the session and the working directory."""
    if event.type == "agent_start":
        return {"prompt": event.text}
    if event.type == "tool_call_complete":
        return {
            "tool": event.tool,
            "arguments": event.arguments,
            "result": event.text[:4000],
            "is_error": event.is_error,
            "policy": event.policy,
            "gate": event.gate,
            "trace_id": event.trace_id,
            "exit_code": event.exit_code,
        }
    if event.type == "agent_end":
        return {"usage": event.usage}
    return {"error": event.text}


def _credential_stop(e: MeshCredentialRefused) -> str:
    text = str(e)
    if text.startswith("the mesh refused"):
        return text  # a sub-agent's, said already
    return (
        f"the mesh refused the agent's credential ({text}): stopping, nothing runs ungoverned. Check the token "
        "(--token, MESH_AGENT_TOKEN) or the agent id, and start again"
    )


def _compacted(c: Compaction) -> str:
    what = [f"pruned {c.pruned} large tool outputs"] if c.pruned else []
    if c.summarized:
        what.append(f"summarized {c.summarized} messages")
    if c.shortened:
        what.append(f"shortened {c.shortened} new tool outputs to fit")
    return f"context compacted: {' and '.join(what) or 'nothing more to take out'} (~{c.before} → ~{c.after} tokens)"


def _retrying(r: Retrying) -> str:
    wait = f" in {r.delay:g} s" if r.delay else ""
    return f"the model could not answer ({r.why[:200]}): asking again{wait} (attempt {r.attempt} of {r.attempts})"


def _denied_by(rule: Any) -> str:
    return f"your permission rule deny {rule.text} ({rule.source}) refuses it"


def _mesh_refusal(d: Decision) -> str:
    """What the model reads when the mesh did not let a built-in call run."""
    why = d.reason or d.rule or f"HTTP {d.status}"
    if d.halted:
        return f"refused: the mesh is halted for this agent ({why}). Do not retry; tell the user."
    if d.status == 408:
        return "refused: the approval request timed out without an answer in the mesh. Tell the user."
    if d.approval_status == "denied":
        return f"refused: approval denied ({why}). Do not retry this call; tell the user."
    if d.status == 429:
        return f"refused: {why} (rate limit or loop detection). Wait or change approach."
    if d.action == "human_approval":
        return "refused: the mesh wants a human's approval and could not queue the call. Tell the user."
    return f"refused by policy: {why}. Do not retry this call; tell the user."


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
