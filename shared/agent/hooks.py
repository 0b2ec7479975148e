"""Hooks: the user's shell commands, run on the agent's lifecycle events.

Each `[[hooks]]` entry of the configuration names an `event` (`session_start`, `user_prompt`, `before_tool`,
`after_tool`, `agent_end`, `error`) and a `command` (run by `/bin/sh -c`) or a `script` (a file, run directly
when executable, else by `/bin/sh`), in the working directory, with the event as one JSON object on stdin.

A `before_tool` hook can block the call, before either gate: exit code 2 (its stderr is the reason), or a JSON
object on stdout `{"decision": "block", "reason": "..."}`. A `before_tool` hook that cannot run or outlives its
timeout blocks too (fail closed). Any other hook's failure is reported, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flux7.shared.agent.config import HookConfig

__all__ = ["HookOutcome", "Hooks"]

_MAX_REASON = 1000


@dataclass
class HookOutcome:
    blocked: bool = False
    reason: str = ""
    problems: list[str] = field(default_factory=list)  # hooks that failed without blocking, said why


class Hooks:
    def __init__(self, hooks: tuple[HookConfig, ...], cwd: Path, session_id: str) -> None:
        self.hooks = hooks
        self.cwd = cwd
        self.session_id = session_id

    def has(self, event: str) -> bool:
        return any(h.event == event for h in self.hooks)

    async def fire(self, event: str, payload: dict[str, Any]) -> HookOutcome:
        """Run every hook of `event` in order; the first `before_tool` hook that blocks stops the rest."""
        outcome = HookOutcome()
        data = json.dumps({"event": event, "session_id": self.session_id, "cwd": str(self.cwd), **payload})
        for hook in self.hooks:
            if hook.event != event:
                continue
            label = hook.command or hook.script
            try:
                code, out, err = await self._run(hook, data.encode())
            except (OSError, TimeoutError) as e:
                why = f"timed out after {hook.timeout:g} s" if isinstance(e, TimeoutError) else str(e)
                if event == "before_tool":
                    return HookOutcome(True, f"the before_tool hook {label!r} failed ({why}): blocked (fail closed)")
                outcome.problems.append(f"{event} hook {label!r}: {why}")
                continue
            if event == "before_tool":
                decision = _decision(out)
                if code == 2 or decision.get("decision") == "block":
                    reason = str(decision.get("reason") or err.strip() or f"blocked by {label!r}")
                    return HookOutcome(True, reason[:_MAX_REASON], outcome.problems)
            if code not in (0, 2):
                outcome.problems.append(f"{event} hook {label!r} exited {code}: {err.strip()[:200]}")
        return outcome

    async def _run(self, hook: HookConfig, stdin: bytes) -> tuple[int, str, str]:
        if hook.command:
            argv = ["/bin/sh", "-c", hook.command]
        else:
            script = (self.cwd / os.path.expanduser(hook.script)).resolve()
            if not script.is_file():
                raise OSError(f"no script at {script}")
            argv = [str(script)] if os.access(script, os.X_OK) else ["/bin/sh", str(script)]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=self.cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), hook.timeout)
        except BaseException:  # timed out, or the run was cancelled: the hook does not outlive it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        return proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _decision(stdout: str) -> dict[str, Any]:
    text = stdout.strip()
    if not text.startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
