"""The agent-level loop detector: a model that asks for the same call with the same arguments, or writes the
same text, turn after turn, is going nowhere. The mesh has its own loop detection per agent and tool; this one
sees the model's turns, built-in calls and refused calls included, and stops the run saying why."""

from __future__ import annotations

import json
from collections.abc import Sequence

from flux7.shared.agent.conversation import ToolCall

__all__ = ["LoopDetector"]

_MIN_TEXT = 20  # shorter text ("Checking.") repeats innocently before different calls


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        return arguments


class LoopDetector:
    def __init__(self, repeats: int = 3) -> None:
        self.repeats = max(2, repeats)
        self._calls: list[tuple[tuple[str, str], ...]] = []
        self._texts: list[str] = []

    def reset(self) -> None:
        self._calls.clear()
        self._texts.clear()

    def check(self, text: str, calls: Sequence[ToolCall]) -> str:
        """Record one model turn; why the run should stop ("" when it should not)."""
        signature = tuple(sorted((c.name, _canonical(c.arguments)) for c in calls))
        self._calls.append(signature)
        self._texts.append(" ".join(text.split()))
        recent = self._calls[-self.repeats :]
        if signature and len(recent) == self.repeats and all(s == signature for s in recent):
            name, arguments = signature[0]
            return (
                f"loop detected: the model asked for {name} with the same arguments {self.repeats} times in a row "
                f"({arguments[:120]})"
            )
        texts = self._texts[-self.repeats :]
        if len(texts[-1]) >= _MIN_TEXT and len(texts) == self.repeats and all(t == texts[-1] for t in texts):
            return f"loop detected: the model wrote the same text {self.repeats} times in a row ({texts[-1][:120]!r})"
        return ""
