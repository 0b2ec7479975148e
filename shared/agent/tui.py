"""The terminal rendering (Rich), for a terminal: the model's answer as markdown (code blocks highlighted) while it
streams, a spinner while the model has not answered yet, tool calls as they start and finish, an edit's diff
highlighted, and the tokens used per turn and per session. `--plain`, `--json` and output that is not a terminal
use the plain renderers in cli.py instead."""

from __future__ import annotations

import json
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.syntax import Syntax
from rich.text import Text

from flux7.shared.agent.events import AgentEvent

__all__ = ["RichRenderer"]

_POLICY_STYLE = {"allow": "green", "deny": "red", "refused": "red", "human_approval": "yellow", "error": "red"}


class RichRenderer:
    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.console = Console(file=out, highlight=False)
        self._live: Live | None = None
        self._text = ""
        self._usage_before: dict[str, int] = {}

    def show(self, event: AgentEvent) -> None:
        kind = event.type
        if kind == "agent_start":
            self._text = ""
            self._start_live(Spinner("dots", text=Text("thinking…", style="dim")))
        elif kind == "text_delta":
            self._text += event.text
            if self._live is not None:
                self._live.update(Markdown(self._text))
        elif kind == "text_complete":
            self._stop_live()
        elif kind in ("tool_call_streaming", "tool_call_delta"):
            return
        elif kind == "tool_call_start":
            self._flush_text()
            args = json.dumps(event.arguments, ensure_ascii=False)
            self.console.print(Text.assemble(("→ ", "cyan"), (event.tool, "bold cyan"), " ", (args[:300], "dim")))
            self._start_live(Spinner("dots", text=Text(f"{event.tool}…", style="dim")))
        elif kind == "tool_call_confirm":
            self._stop_live()
            self.console.print(Text(f"? {event.tool} needs your confirmation: {event.text}", style="bold yellow"))
        elif kind == "tool_call_waiting":
            held = f"approval {event.approval_id} is pending in the mesh" if event.approval_id else "the mesh"
            self._start_live(Spinner("clock", text=Text(f"waiting: {held}", style="yellow")))
        elif kind == "tool_call_complete":
            self._stop_live()
            self._complete(event)
            self._start_live(Spinner("dots", text=Text("thinking…", style="dim")))
        elif kind == "notice":
            self._flush_text()
            self.console.print(Text(f"note: {event.text}", style="dim yellow"))
        elif kind == "agent_error":
            self._stop_live()
            self.console.print(Text(f"error: {event.text}", style="bold red"))
        elif kind == "agent_end":
            self._stop_live()
            self._usage(event.usage)

    def _complete(self, event: AgentEvent) -> None:
        style = _POLICY_STYLE.get(event.policy, "white")
        parts: list[tuple[str, str] | str] = [("← ", style)]
        if event.gate in ("local", "hook", "offline"):
            parts.append((f"{event.gate} ", "dim"))
        parts.append((event.policy, f"bold {style}"))
        if event.approval_id:
            parts.append((f" · approval {event.approval_id[:8]}", "yellow"))
        if event.trace_id:
            parts.append((f" · trace {event.trace_id[:12]}", "dim"))
        if event.exit_code is not None:
            parts.append((f" · exit {event.exit_code}", "red" if event.exit_code else "dim"))
        first = event.text.strip().splitlines()[0][:160] if event.text.strip() else ""
        parts.append(f": {first}")
        self.console.print(Text.assemble(*parts))
        if event.diff:
            self.console.print(Syntax(event.diff, "diff", theme="ansi_dark", background_color="default"))

    def _usage(self, usage: dict[str, int]) -> None:
        turn = {k: v - self._usage_before.get(k, 0) for k, v in usage.items()}
        self._usage_before = dict(usage)
        self.console.print(
            Text(
                f"tokens: this prompt {turn.get('input_tokens', 0)} in / {turn.get('output_tokens', 0)} out · "
                f"session {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out",
                style="dim",
            )
        )

    def _start_live(self, what: Spinner) -> None:
        if self._live is not None:
            if not self._text:
                self._live.update(what)
            return
        self._live = Live(what, console=self.console, refresh_per_second=12, transient=False)
        self._live.start()

    def _flush_text(self) -> None:
        """End the streamed answer so far (it stays on screen), before a line about a tool."""
        self._stop_live()

    def _stop_live(self) -> None:
        if self._live is None:
            return
        if not self._text:
            self._live.update(Text(""))
        self._live.stop()
        self._live = None
        self._text = ""
