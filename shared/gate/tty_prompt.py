"""The `tty` approval channel (CONTRACT 1.2, 1.14): ask the person at the terminal, through /dev/tty.

Used by the MCP stdio server, whose stdin and stdout carry JSON-RPC: the question goes to the controlling
terminal instead, and an unanswered or unreadable prompt is no decision (the caller falls back or denies)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import time
from typing import Any, Literal

__all__ = ["DEFAULT_TTY", "TerminalChannel", "ask", "available", "terminal_channel"]

DEFAULT_TTY = "/dev/tty"
Decision = Literal["approve", "deny"]


def available(tty_path: str = DEFAULT_TTY) -> bool:
    """Whether a terminal can be opened for a prompt (false in a service, a container, CI)."""
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _question(view: dict[str, Any], timeout: float) -> str:
    params = json.dumps(view.get("params"), ensure_ascii=False)
    if len(params) > 400:
        params = params[:399] + "…"
    risk = "\n  WARNING: the arguments look like a prompt injection" if view.get("injection_risk") else ""
    return (
        f"\n[flux7] approval {str(view.get('id', ''))[:8]}: agent {view.get('agent_id', '?')} "
        f"wants to call {view.get('tool', '?')}\n  params: {params}{risk}\n"
        f"  approve? [y/N] ({int(timeout)}s) "
    )


def ask(view: dict[str, Any], timeout: float, *, tty_path: str = DEFAULT_TTY) -> Decision | None:
    """Prompt on the terminal and wait up to `timeout` seconds for a line: y/yes approves, n/no denies.
    None when there is no terminal, no answer in time, or an answer that is neither."""
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    try:
        os.write(fd, _question(view, timeout).encode())
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                os.write(fd, b"\n  (no answer: left to the queue)\n")
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 256)
            if not chunk:
                return None
            line += chunk
        answer = line.decode(errors="replace").strip().lower()
        if answer in ("y", "yes"):
            return "approve"
        if answer in ("n", "no"):
            return "deny"
        return None
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


class TerminalChannel:
    """The tty channel as the stdio transport hands it to the gate (shared/gate/approval_flow.py). `fail_closed`
    (`approval.channel: tty`): with nobody to ask, the call is denied; otherwise (`tty-fallback`) the approval is
    left to the queue."""

    def __init__(self, *, fail_closed: bool, tty_path: str = DEFAULT_TTY) -> None:
        self.fail_closed = fail_closed
        self._tty_path = tty_path

    async def ask(self, view: dict[str, Any], timeout: float) -> tuple[Decision | None, str]:
        """(the answer, why): None leaves the approval pending."""
        answer = None
        if available(self._tty_path):
            answer = await asyncio.to_thread(ask, view, timeout, tty_path=self._tty_path)
        if answer is None and self.fail_closed:
            return "deny", "approval.channel is tty and no terminal answered"
        return answer, "answered at the terminal"


def terminal_channel(channel: str) -> TerminalChannel | None:
    """The channel `approval.channel` names for the stdio transport: None for `queue`."""
    if channel == "queue":
        return None
    return TerminalChannel(fail_closed=channel == "tty")
