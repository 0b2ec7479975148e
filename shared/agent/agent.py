"""The agent loop: ask the model, run the tool calls it asks for through the mesh, give it the results, repeat
until it answers without a tool call (or `max_turns` runs out).

`async for event in agent.run("...")` streams `AgentEvent`s: `agent_start`, `text_delta`s as the model writes,
`tool_call_start` / `tool_call_complete` around each governed call, then `text_complete` and `agent_end` (or
`agent_error`). The conversation is kept between runs, so a REPL is a loop over `run`.

Nothing runs outside the mesh: a tool name the model made up, or arguments that are not a JSON object, are
answered with an error result without calling anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from .conversation import Message, ToolCall, ToolResult, ToolSpec
from .events import AgentEvent
from .llm import Chat, Finished, LLMError, TextDelta, ToolCallDone
from .mesh_tools import MeshTool, MeshTools, MeshUnavailable, ToolOutcome

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Agent"]

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
    ) -> None:
        self.chat = chat
        self.mesh = mesh
        self.system_prompt = system_prompt
        self.max_turns = max(1, max_turns)
        self.keep_messages = max(2, keep_messages)
        self.wait_notice = wait_notice  # seconds without an answer before saying the call is waiting
        self.messages: list[Message] = []
        self.tools: list[MeshTool] | None = None
        self.usage = {"input_tokens": 0, "output_tokens": 0}

    def clear(self) -> None:
        self.messages.clear()

    async def refresh_tools(self) -> list[MeshTool]:
        self.tools = await self.mesh.list()
        return self.tools

    async def run(self, prompt: str) -> AsyncIterator[AgentEvent]:
        yield AgentEvent("agent_start", text=prompt)
        if self.tools is None:
            try:
                await self.refresh_tools()
            except MeshUnavailable as e:
                yield AgentEvent("agent_error", text=f"cannot list the mesh's tools: {e}", is_error=True)
                return
        start = len(self.messages)
        self.messages.append(Message("user", prompt))
        specs: list[ToolSpec] = [t.spec for t in self.tools or []]
        for _ in range(self.max_turns):
            self._trim()
            text: list[str] = []
            calls: list[ToolCall] = []
            try:
                async for piece in self.chat.stream(self.system_prompt, self.messages, specs):
                    if isinstance(piece, TextDelta):
                        text.append(piece.text)
                        yield AgentEvent("text_delta", text=piece.text)
                    elif isinstance(piece, ToolCallDone):
                        calls.append(piece.call)
                    elif isinstance(piece, Finished):
                        for k, v in piece.usage.items():
                            self.usage[k] = self.usage.get(k, 0) + v
            except LLMError as e:
                # The next prompt starts from before this run (calls it already made stay in the mesh's traces).
                del self.messages[start:]
                yield AgentEvent("agent_error", text=str(e), is_error=True)
                return
            self.messages.append(Message("assistant", "".join(text), tool_calls=calls))
            if not calls:
                yield AgentEvent("text_complete", text="".join(text))
                yield AgentEvent("agent_end", usage=dict(self.usage))
                return
            results: list[ToolResult] = []
            for call in calls:
                async for event in self._run_call(call, results):
                    yield event
            self.messages.append(Message("tool", results=results))
        stopped = f"stopped after {self.max_turns} model turns"
        self.messages.append(Message("assistant", f"({stopped})"))  # the conversation stays well formed
        yield AgentEvent("agent_error", text=stopped, is_error=True)

    async def _run_call(self, call: ToolCall, results: list[ToolResult]) -> AsyncIterator[AgentEvent]:
        name = self.mesh.mesh_name(call.name)
        arguments = _arguments(call.arguments)
        shown = name or call.name
        yield AgentEvent("tool_call_start", tool=shown, call_id=call.id, arguments=arguments or {})
        if name is None:
            outcome = ToolOutcome(f"error: there is no tool named {call.name!r}", True, "error", 0)
        elif arguments is None:
            outcome = ToolOutcome("error: the arguments must be a JSON object; nothing was called", True, "error", 0)
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
        yield AgentEvent(
            "tool_call_complete",
            text=outcome.content,
            tool=shown,
            call_id=call.id,
            arguments=arguments or {},
            policy=outcome.policy,
            trace_id=outcome.trace_id,
            approval_id=outcome.approval_id,
            is_error=outcome.is_error,
        )

    def _trim(self) -> None:
        """Keep the conversation bounded: drop the oldest exchanges, never splitting a tool call from its result."""
        while len(self.messages) > self.keep_messages:
            del self.messages[0]
            while self.messages and self.messages[0].role != "user":
                del self.messages[0]


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
