"""The local safety layer: the first of the two gates every built-in tool call passes (the mesh is the second).

Fast and offline. It answers `refuse` (a dangerous pattern: never runs, never reaches the mesh), `ask` (the user
confirms at the terminal) or `allow`, from the tool, its arguments, the working directory and the approval mode:

| mode          | reads | edits in the cwd | shell (not only reading) | a path outside the cwd |
|---------------|-------|------------------|--------------------------|------------------------|
| `read-only`   | run   | refused          | refused                  | refused                |
| `always-ask`  | ask   | ask              | ask                      | ask                    |
| `on-request`  | run   | ask              | ask                      | ask                    |
| `auto-edit`   | run   | run              | ask                      | ask                    |
| `auto`        | run   | run              | run                      | ask                    |
| `yolo`        | run   | run              | run                      | run                    |

Refused in every mode, yolo included: a dangerous pattern (below), a command that deletes `/`, a system folder
or the home directory once expanded (shared/agent/commands.py: `rm -rf "$HOME"`, `find ~ -delete`), and any path
argument inside a hidden location (the user's secrets, the mesh's data; shared/agent/sandbox.py). Shell commands
that only read inside the working folder (parsed, shared/agent/commands.py) run like reads. Every shell command
runs in the OS sandbox; where it cannot start, every shell command asks (read-only: refused unless it only reads).
An edit of what runs code later (`.flux7/`, `.git/hooks`, `.git/config`) asks in every mode but read-only.

A mesh tool (`check_mesh_tool`) is the mesh's to decide: locally, `read-only` refuses one the mesh does not
classify as a read, `always-ask` asks, and every other mode lets it through to the mesh.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from flux7.shared.agent.commands import destroys, reads_only, under

__all__ = ["MODES", "PROTECTED", "Verdict", "check", "check_mesh_tool", "dangerous", "escapes"]

MODES = ("read-only", "always-ask", "on-request", "auto-edit", "auto", "yolo")
Mode = Literal["read-only", "always-ask", "on-request", "auto-edit", "auto", "yolo"]

# A command is refused when any of these matches it (after collapsing whitespace).
_DANGEROUS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-[a-zA-Z-]*\s+)*(/|/\*|~|~/|\$HOME)(\s|$|;|&|\|)"
        ),
        "recursive delete of / or the home directory",
    ),
    (re.compile(r"\brm\s+.*--no-preserve-root"), "rm --no-preserve-root"),
    (re.compile(r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"), "a fork bomb"),
    (re.compile(r"\bmkfs(\.\w+)?\b"), "formatting a file system (mkfs)"),
    (re.compile(r"\bdd\b[^|;&]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)"), "dd onto a device"),
    (re.compile(r">\s*/dev/(sd[a-z]|nvme\d|hd[a-z]|disk\d|mmcblk\d)"), "writing onto a raw disk device"),
    (re.compile(r"\bchmod\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+(0?777|a\+rwx)\s+/(\s|$)"), "chmod -R 777 /"),
    (re.compile(r"\bchmod\s+(0?777|a\+rwx)\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+/(\s|$)"), "chmod -R 777 /"),
    (re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b"), "piping a download into a shell"),
    (re.compile(r"\b(shutdown|reboot|halt|poweroff)\b"), "shutting the machine down"),
    (re.compile(r"(>|\btee\b|\bcp\b|\bmv\b|\brm\b|\bchmod\b)[^|;&]*(~|\$HOME|/root|/home/[^/\s]+)/\.ssh\b"), "~/.ssh"),
]

# Inside the working folder: what the agent or git runs later, outside any sandbox.
PROTECTED = (".flux7", ".git/hooks", ".git/config")

Action = Literal["allow", "ask", "refuse"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str
    firm: bool = False  # an `ask` every mode makes (no sandbox, code run later): no permission rule answers it


def dangerous(command: str) -> str:
    """Why `command` is refused outright, or "" when no dangerous pattern matches."""
    flat = " ".join(command.split())
    for pattern, why in _DANGEROUS:
        if pattern.search(flat):
            return why
    return ""


def escapes(path: str, cwd: Path) -> bool:
    """Whether `path` (relative to cwd, `~` expanded) resolves outside the working directory."""
    return not under(_resolved(path, cwd), cwd.resolve())


def _resolved(path: str, cwd: Path) -> Path:
    return (cwd / os.path.expanduser(path)).resolve()


def check(
    tool: str,
    arguments: dict[str, Any],
    *,
    mutating: bool,
    mode: str,
    cwd: Path,
    home: Path,
    hidden: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    sandboxed: bool = False,
) -> Verdict:
    """The local gate's verdict on one built-in call whose arguments already passed their schema. `hidden`: what
    the agent must not see; `env`: the environment a shell command runs with (for expanding it); `sandboxed`:
    whether a shell command will run in the OS sandbox (without one, every command asks)."""
    paths = [str(arguments[k]) for k in ("path", "cwd") if isinstance(arguments.get(k), str)]
    command = str(arguments.get("command") or "") if tool == "shell" else ""
    if command and (why := destroys(command, cwd=cwd, home=home, env=env or {}) or dangerous(command)):
        return Verdict("refuse", f"dangerous command refused by the local safety layer: {why}")
    root = cwd.resolve()
    resolved = [(p, _resolved(p, cwd)) for p in paths]
    secret = next((p for p, r in resolved if any(under(r, h) for h in hidden)), None)
    if secret is not None:
        return Verdict("refuse", f"{secret} is hidden from the agent (a secret, or the mesh's data)")
    ssh = (home / ".ssh").resolve()
    if mutating and any(under(r, ssh) for _, r in resolved):
        return Verdict("refuse", "writes under ~/.ssh are refused by the local safety layer")
    outside = [p for p, r in resolved if not under(r, root)]
    safe_read = not mutating or (tool == "shell" and reads_only(command, cwd=cwd, home=home, hidden=hidden))
    if mode == "read-only":
        if not safe_read:
            return Verdict("refuse", f"{tool} changes things and the approval mode is read-only")
        if outside:
            return Verdict("refuse", f"{outside[0]} is outside the working directory (read-only mode)")
        if tool == "shell" and not sandboxed:
            return Verdict("ask", "no sandbox: every shell command asks", firm=True)
        return Verdict("allow", "a read")
    if tool == "shell" and not sandboxed:
        return Verdict("ask", "no sandbox: every shell command asks", firm=True)
    if mutating and tool != "shell" and any(under(r, root / p) for _, r in resolved for p in PROTECTED):
        why = "it changes what runs code later (.flux7/, .git/hooks, .git/config): every mode asks"
        return Verdict("ask", why, firm=True)
    if mode == "yolo":
        return Verdict("allow", "yolo mode")
    if outside:
        return Verdict("ask", f"{outside[0]} is outside the working directory {cwd}")
    if mode == "always-ask":
        return Verdict("ask", "always-ask mode")
    if safe_read:
        return Verdict("allow", "a read" if not mutating else "a command that only reads")
    if mode == "auto" or (mode == "auto-edit" and tool != "shell"):
        return Verdict("allow", f"{mode} mode")
    return Verdict("ask", f"{tool} changes things ({mode} mode asks)")


def check_mesh_tool(tool: str, access: str, mode: str) -> Verdict:
    """The local gate's verdict on a mesh tool, whose policy, approvals and limits the mesh applies next."""
    if mode == "read-only" and access != "read":
        return Verdict(
            "refuse", f"{tool} is not a read ({access}, as the mesh classifies it) and the mode is read-only"
        )
    if mode == "always-ask":
        return Verdict("ask", "always-ask mode")
    return Verdict("allow", "the mesh decides")
