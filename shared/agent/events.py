"""The agent's run as a stream of events, for the terminal (or any other front end) to render."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["AgentEvent", "EventType"]

EventType = Literal[
    "agent_start",
    "notice",
    "text_delta",
    "text_complete",
    "tool_call_streaming",
    "tool_call_delta",
    "tool_call_start",
    "tool_call_confirm",
    "tool_call_waiting",
    "tool_call_output",
    "tool_call_complete",
    "agent_end",
    "agent_error",
    "agent_interrupted",
]


@dataclass(frozen=True)
class AgentEvent:
    type: EventType
    text: str = ""
    tool: str = ""  # the mesh's tool name
    call_id: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    policy: str = ""  # allow | deny | human_approval | halted | error | refused (locally) ...: how it was decided
    trace_id: str = ""
    approval_id: str = ""
    is_error: bool = False
    usage: dict[str, int] = field(default_factory=dict)
    gate: str = ""  # which gate decided: local | mesh | offline (the mesh was not asked)
    diff: str = ""  # an edit's unified diff
    exit_code: int | None = None
    cost: dict[str, float] = field(default_factory=dict)  # agent_end: US dollars, `prompt` and `session`
    rules: list[str] = field(default_factory=list)  # tool_call_confirm: the rules an "always" answer would save
