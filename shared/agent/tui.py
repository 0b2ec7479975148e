"""The terminal rendering (Rich), for a terminal: the model's answer as markdown (code blocks highlighted) while it
streams, a spinner while the model has not answered yet, tool calls as they start and finish, a command's output
as it comes, an edit's diff highlighted (before its question too), and the tokens and cost of each prompt and of
the session. `--plain`, `--json` and output that is not a terminal use the plain renderers in repl.py instead."""

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
        self._output_mid_line = False

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
            if event.diff:
                self.console.print(Syntax(event.diff, "diff", theme="ansi_dark", background_color="default"))
            self.console.print(Text(f"? {event.tool} needs your confirmation: {event.text}", style="bold yellow"))
        elif kind == "tool_call_waiting":
            held = f"approval {event.approval_id} is pending in the mesh" if event.approval_id else "held in the mesh"
            how = f" for a human's approval: {event.text}" if event.text else ""
            self._start_live(Spinner("clock", text=Text(f"waiting: {held}{how}", style="yellow")))
        elif kind == "tool_call_output":
            self._stop_live()
            self.console.file.write(event.text)
            self.console.file.flush()
            self._output_mid_line = not event.text.endswith("\n")
        elif kind == "tool_call_complete":
            self._stop_live()
            self._complete(event)
            self._start_live(Spinner("dots", text=Text("thinking…", style="dim")))
        elif kind == "notice":
            self._flush_text()
            self.console.print(Text(f"note: {event.text}", style="dim yellow"))
        elif kind == "agent_error":
            self._stop_live()
            text = event.text[7:] if event.text.startswith("error: ") else event.text
            self.console.print(Text(f"error: {text}", style="bold red"))
        elif kind == "agent_interrupted":
            self._stop_live()
            self.console.print(Text("interrupted: back to the prompt", style="bold yellow"))
        elif kind == "agent_end":
            self._stop_live()
            self._usage(event.usage, event.cost)

    def _complete(self, event: AgentEvent) -> None:
        from flux7.shared.agent.status import status_line  # the plain renderer's words, coloured here

        if self._output_mid_line:
            self.console.file.write("\n")
            self._output_mid_line = False
        style = _POLICY_STYLE.get(event.policy, "white")
        head, _, rest = status_line(event).partition(": ")
        self.console.print(Text.assemble((head, f"bold {style}"), (f": {rest}" if rest else "", "")))
        if event.diff:
            self.console.print(Syntax(event.diff, "diff", theme="ansi_dark", background_color="default"))

    def _usage(self, usage: dict[str, int], cost: dict[str, float]) -> None:
        turn = {k: v - self._usage_before.get(k, 0) for k, v in usage.items()}
        self._usage_before = dict(usage)
        spent = f" · ${cost['prompt']:.4f} this prompt, ${cost['session']:.4f} session" if cost else ""
        self.console.print(
            Text(
                f"tokens: this prompt {turn.get('input_tokens', 0)} in / {turn.get('output_tokens', 0)} out · "
                f"session {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out{spent}",
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
