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
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flux7.shared.agent import safety
from flux7.shared.agent.builtin_tools import (
    BUILTINS,
    SUBAGENT_DEFAULT_TOOLS,
    SUBAGENT_PROMPT,
    Builtin,
    ToolContext,
    ToolRun,
    validation_error,
)
from flux7.shared.agent.commands import reads_only
from flux7.shared.agent.context import Compaction, ContextEngine
from flux7.shared.agent.conversation import Message, ToolCall, ToolResult, ToolSpec
from flux7.shared.agent.events import AgentEvent
from flux7.shared.agent.hooks import Hooks
from flux7.shared.agent.llm import Chat, Finished, LLMError, TextDelta, ToolCallDelta, ToolCallDone, ToolCallStart
from flux7.shared.agent.loop_detector import LoopDetector
from flux7.shared.agent.mesh_tools import (
    Decision,
    MeshCredentialRefused,
    MeshTool,
    MeshTools,
    MeshUnavailable,
    ToolOutcome,
)
from flux7.shared.agent.sandbox import Sandbox
from flux7.shared.agent.sessions import Session, SessionError, SessionStore

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Agent", "Confirm", "Workspace"]

# Asks the user whether a call the local safety layer flagged may run: (tool, arguments, why) -> yes?
Confirm = Callable[[str, dict[str, Any], str], Awaitable[bool]]


async def _nobody(_tool: str, _arguments: dict[str, Any], _why: str) -> bool:
    return False  # nobody to ask: a call that needs a confirmation does not run (fail closed)


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
        self.stopped = ""  # why the agent cannot go on (the mesh refused its credential); "" while it can
        self._unsaved = ""  # why the last save failed, until it is said
        self._reports: set[asyncio.Future[bool]] = set()  # outcome reports still on their way to the mesh
        self._writing: asyncio.Future[None] | None = None  # the session's last save, until it is written

    def add_tools(self, tools: Sequence[Builtin]) -> None:
        """More tools that run on this side of the mesh (an MCP server's), through the same gates."""
        if self.workspace is not None:
            self._builtin_specs.update({t.name: t for t in tools if t.name not in self._builtin_specs})

    def switch(self, session: Session) -> None:
        """Continue `session` from here: its conversation, usage and mesh session id."""
        self.session = session
        self.messages = session.messages
        self.usage = session.usage
        self.mesh.set_session(session.id)
        if self.hooks is not None:
            self.hooks.session_id = session.id

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
        try:
            async for event in self._events(prompt):
                yield event
        finally:
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
        start = len(self.messages)
        self.loops.reset()
        self.messages.append(Message("user", prompt))
        self._save()
        specs = self.specs()
        for _ in range(self.max_turns):
            self._trim()
            if self.context is not None and self.context.over(self.messages, self.system_prompt, specs):
                try:
                    compacted = await self.context.compact(self.chat, self.messages, start, self.system_prompt, specs)
                except LLMError as e:
                    compacted = None
                    yield AgentEvent("notice", text=f"compaction failed, going on without it: {e}")
                if compacted is not None:
                    if compacted.summarized:
                        start = 2  # the summary and its acknowledgement, then this prompt
                    self._save()
                    yield AgentEvent("notice", text=_compacted(compacted))
            text: list[str] = []
            calls: list[ToolCall] = []
            try:
                async for piece in self.chat.stream(self.system_prompt, self.messages, specs):
                    if isinstance(piece, TextDelta):
                        text.append(piece.text)
                        yield AgentEvent("text_delta", text=piece.text)
                    elif isinstance(piece, ToolCallStart):
                        yield AgentEvent("tool_call_streaming", tool=piece.name, call_id=piece.id)
                    elif isinstance(piece, ToolCallDelta):
                        yield AgentEvent("tool_call_delta", text=piece.arguments, call_id=str(piece.index))
                    elif isinstance(piece, ToolCallDone):
                        calls.append(piece.call)
                    elif isinstance(piece, Finished):
                        for k, v in piece.usage.items():
                            self.usage[k] = self.usage.get(k, 0) + v
            except LLMError as e:
                # The next prompt starts from before this run (calls it already made stay in the mesh's traces).
                del self.messages[start:]
                self._save()
                yield AgentEvent("agent_error", text=str(e), is_error=True)
                return
            self.messages.append(Message("assistant", "".join(text), tool_calls=calls))
            looping = self.loops.check("".join(text), calls)
            if looping:
                # Nothing of this turn runs; the conversation stays well formed for the next prompt.
                skipped = [ToolResult(c.id, f"not run: {looping}", True) for c in calls]
                if skipped:
                    self.messages.append(Message("tool", results=skipped))
                self.messages.append(Message("assistant", f"(stopped: {looping})"))
                self._save()
                yield AgentEvent("agent_error", text=f"stopped: {looping}", is_error=True)
                return
            self._save()
            if not calls:
                yield AgentEvent("text_complete", text="".join(text))
                yield AgentEvent("agent_end", usage=dict(self.usage))
                return
            results: list[ToolResult] = []
            try:
                for call in calls:
                    async for event in self._run_call(call, results):
                        yield event
            except MeshCredentialRefused as e:
                self.stopped = _credential_stop(e)
                done = {r.call_id for r in results}
                results += [ToolResult(c.id, "not run: the agent stopped", True) for c in calls if c.id not in done]
                self.messages.append(Message("tool", results=results))
                self._save()
                yield AgentEvent("agent_error", text=self.stopped, is_error=True)
                return
            self.messages.append(Message("tool", results=results))
            self._save()
        stopped = f"stopped after {self.max_turns} model turns"
        self.messages.append(Message("assistant", f"({stopped})"))  # the conversation stays well formed
        self._save()
        yield AgentEvent("agent_error", text=stopped, is_error=True)

    async def _run_call(self, call: ToolCall, results: list[ToolResult]) -> AsyncIterator[AgentEvent]:
        builtin = self._builtin_specs.get(call.name)
        if builtin is not None:
            async for event in self._run_builtin(builtin, call, results):
                yield event
            return
        name = self.mesh.mesh_name(call.name)
        arguments = _arguments(call.arguments)
        shown = name or call.name
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
            # Gate 1, locally: the approval mode (the mesh's policy, approvals and limits are gate 2).
            mode = self.workspace.mode if self.workspace is not None else "on-request"
            local = safety.check_mesh_tool(name, self.mesh.access(name), mode)
            confirmed = local.action == "allow"
            if local.action == "ask":
                yield AgentEvent(
                    "tool_call_confirm", tool=name, call_id=call.id, arguments=arguments, text=local.reason
                )
                confirmed = await self.workspace.confirm(name, arguments, local.reason) if self.workspace else False
            if not confirmed:
                why = local.reason if local.action == "refuse" else f"the user did not confirm it ({local.reason})"
                outcome, gate = ToolOutcome(f"refused: {why}. Tell the user.", True, "refused", 0), "local"
            else:
                pending = asyncio.ensure_future(self.mesh.call(name, arguments))
                try:
                    done, _ = await asyncio.wait({pending}, timeout=self.wait_notice)
                    if not done:  # most likely held for a human's approval: say so, and which one when visible
                        approval = await self.mesh.pending_approval(name)
                        yield AgentEvent("tool_call_waiting", tool=shown, call_id=call.id, approval_id=approval)
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
        arguments = _arguments(call.arguments)
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
        # Gate 1: the local safety layer. A refusal never reaches the mesh.
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
        confirmed = False
        if verdict.action == "ask":
            yield AgentEvent(
                "tool_call_confirm", tool=tool.mesh_name, call_id=call.id, arguments=arguments, text=verdict.reason
            )
            if not await ws.confirm(tool.mesh_name, arguments, verdict.reason):
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
            pending = asyncio.ensure_future(self.mesh.decide(tool.mesh_name, arguments))
            try:
                done, _ = await asyncio.wait({pending}, timeout=self.wait_notice)
                if not done:  # held for a human's approval in the mesh: say so, and which one when visible
                    approval = await self.mesh.pending_approval(tool.mesh_name)
                    yield AgentEvent("tool_call_waiting", tool=tool.mesh_name, call_id=call.id, approval_id=approval)
                decision = await pending
            except MeshUnavailable as e:
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
            if decision is not None and decision.action != "allow":
                yield finish(
                    _mesh_refusal(decision),
                    "human_approval" if decision.approval_id else decision.action,
                    "mesh",
                    error=True,
                    trace_id=decision.trace_id,
                    approval_id=decision.approval_id,
                )
                return
        started = time.perf_counter()
        if tool.mesh_name == "task":  # a sub-agent: its calls pass both gates themselves, shown as they happen
            outcome: list[ToolRun] = []
            async for event in self._subagent(arguments, outcome):
                yield event
            run = outcome[0]
        else:
            run = await tool.run(arguments, ws.cwd, ws.context(sandboxed=sandboxed, confirmed=confirmed))
        elapsed_ms = (time.perf_counter() - started) * 1000
        if decision is not None and decision.trace_id:
            # Sent beside the next model turn rather than before it; the run waits for it before it ends.
            report = self.mesh.report(
                decision.trace_id,
                ok=not run.is_error,
                exit_code=run.exit_code,
                size=len(run.content.encode()),
                duration_ms=elapsed_ms,
                error=run.content[:500] if run.is_error else "",
            )
            self._reports.add(asyncio.ensure_future(report))
        if decision is None:
            policy, gate = ("offline", "offline") if ws.offline else ("ungoverned", "local")
        else:
            policy, gate = ("human_approval" if decision.approval_id else "allow"), "mesh"
        yield finish(
            run.content,
            policy,
            gate,
            error=run.is_error,
            trace_id=decision.trace_id if decision else "",
            approval_id=decision.approval_id if decision else "",
            diff=run.diff,
            exit_code=run.exit_code,
        )

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
    return f"context compacted: {' and '.join(what)} (~{c.before} → ~{c.after} tokens)"


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
