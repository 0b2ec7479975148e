"""The `tty` approval channel (CONTRACT 1.2, 1.14): ask the person at the terminal, through /dev/tty.

Used by the MCP stdio server, whose stdin and stdout carry JSON-RPC: the question goes to the controlling
terminal instead, and an unanswered or unreadable prompt is no decision (the caller falls back or denies)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from typing import Any, Literal

__all__ = ["DEFAULT_TTY", "ask", "available"]

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
