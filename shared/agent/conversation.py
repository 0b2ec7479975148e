"""What the agent and the model say to each other, in one neutral form that each provider translates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Message", "ToolCall", "ToolResult", "ToolSpec"]


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
