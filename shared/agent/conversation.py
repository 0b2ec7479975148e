"""What the agent and the model say to each other, in one neutral form that each provider translates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["NOT_ANSWERED", "Message", "ToolCall", "ToolResult", "ToolSpec", "close_dangling"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it. `name` is safe for every provider (`[A-Za-z0-9_-]{1,64}`)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text the model wrote; parsed (and refused when invalid) by the agent
    # Provider fields that must go back with the call as they came (Gemini's `extra_content.google.
    # thought_signature` on its OpenAI-compatible endpoint: strict tool calling refuses a turn without it).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


@dataclass
class Message:
    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)


NOT_ANSWERED = "not run: the agent stopped before this call was answered (interrupted)"


def close_dangling(messages: list[Message], text: str = NOT_ANSWERED) -> int:
    """Answer, in place, every tool call that has no result (a session saved while a call was pending: killed, or
    interrupted at a confirmation) with an error result saying it did not run, so the conversation is one every
    provider accepts. Returns how many calls it closed."""
    closed = 0
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            after = messages[i + 1] if i + 1 < len(messages) and messages[i + 1].role == "tool" else None
            answered = {r.call_id for r in after.results} if after is not None else set()
            missing = [ToolResult(c.id, text, True) for c in m.tool_calls if c.id not in answered]
            if missing:
                closed += len(missing)
                if after is None:
                    messages.insert(i + 1, Message("tool", results=missing))
                else:
                    after.results.extend(missing)
        i += 1
    return closed
