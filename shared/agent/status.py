"""The one line a tool's result gets on the terminal, shared by the plain renderer (repl.py) and the Rich one
(tui.py), which colours the same words."""

from __future__ import annotations

from flux7.shared.agent.events import AgentEvent

__all__ = ["status_line", "unprefixed"]


def unprefixed(text: str, word: str) -> str:
    """`text` without a leading `word:` (so a line never reads `error: error: ...`)."""
    return text[len(word) + 1 :].lstrip() if text.startswith(word + ":") else text


_SHOWN_LINES = 6  # lines of a tool's result shown on the terminal (a command's output was shown as it came)


def status_line(event: AgentEvent) -> str:
    """`← [gate] policy · approval · trace · exit: the result's first lines`."""
    where = f" · trace {event.trace_id[:12]}" if event.trace_id else ""
    approval = f" · approval {event.approval_id[:8]}" if event.approval_id else ""
    gate = {"local": "local ", "offline": "offline ", "hook": "hook ", "mesh": ""}.get(event.gate, "")
    if gate.strip() == event.policy:
        gate = ""  # `offline offline`
    code = f" · exit {event.exit_code}" if event.exit_code is not None else ""
    head = f"← {gate}{event.policy}{approval}{where}{code}"
    text = event.text.strip("\n").rstrip()
    text = unprefixed(text, event.policy) if event.policy in ("error", "refused") else text
    if event.tool == "shell" and event.exit_code is not None:
        return head  # its output was shown as it came
    lines = text.splitlines()
    if event.diff and lines:
        lines = lines[:1]  # an edit: its diff follows
    shown = "\n  ".join(line[:200] for line in lines[:_SHOWN_LINES])
    more = f"\n  … {len(lines) - _SHOWN_LINES} more lines" if len(lines) > _SHOWN_LINES else ""
    return f"{head}: {shown}{more}" if shown else head
