"""Checkpoints: every write_file and edit_file saves what the file was before, so `/undo` and `/rewind` can put
it back. Files only: a shell command's changes are not recorded, the conversation is not rewound, and the mesh's
trail keeps every call that happened.

The snapshots are kept beside the session (`<sessions>/<id>.checkpoints/`, content-addressed) and listed in the
session file, so a resumed session can still undo."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux7.shared.agent.builtin_tools import FileChange

__all__ = ["Change", "Checkpoints", "UndoRefused"]


class UndoRefused(Exception):
    """A change that cannot be undone without losing something (the file changed again since)."""


@dataclass(frozen=True)
class Change:
    point: int  # the prompt that made it (1 = the session's first prompt)
    prompt: str  # that prompt's first words
    tool: str
    path: str  # resolved
    shown: str
    before: str  # the snapshot's hash, "" when the file did not exist
    after: str

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Checkpoints:
    def __init__(self, folder: Path, changes: list[dict[str, Any]]) -> None:
        self.folder = folder
        self.changes = changes  # the session's list, kept in its file

    def record(self, point: int, prompt: str, tool: str, change: FileChange) -> list[tuple[Path, bytes]]:
        """List the change; what must be written for it (the file's bytes before, once per content), which the
        caller writes beside what comes next (`write`)."""
        before = hashlib.sha256(change.before).hexdigest() if change.before is not None else ""
        after = hashlib.sha256(change.after).hexdigest()
        entry = Change(point, " ".join(prompt.split())[:60], tool, str(change.path), change.shown, before, after)
        self.changes.append(entry.to_json())
        return [(self.folder / before, change.before)] if change.before is not None else []

    def write(self, blobs: list[tuple[Path, bytes]]) -> None:
        for path, data in blobs:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                path.write_bytes(data)

    def points(self) -> list[tuple[int, str, list[str]]]:
        """Each prompt that changed files: its number, its first words, the files."""
        seen: dict[int, tuple[str, list[str]]] = {}
        for c in self.changes:
            _, files = seen.setdefault(c["point"], (c["prompt"], []))
            if c["shown"] not in files:
                files.append(c["shown"])
        return [(p, prompt, files) for p, (prompt, files) in sorted(seen.items())]

    def _revert(self, c: dict[str, Any]) -> None:
        path = Path(c["path"])
        now = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
        if now != c["after"]:
            raise UndoRefused(
                f"{c['shown']} changed since the agent's {c['tool']} (by you or a command): left as it is"
            )
        if c["before"]:
            path.write_bytes((self.folder / c["before"]).read_bytes())
        else:
            path.unlink()

    def undo(self) -> dict[str, Any] | None:
        """Put the last changed file back as it was before that change; the change it undid (None: nothing)."""
        if not self.changes:
            return None
        self._revert(self.changes[-1])
        return self.changes.pop()

    def rewind(self, point: int) -> list[dict[str, Any]]:
        """Undo every change from prompt `point` on, newest first; the changes undone. Stops at the first file
        that changed since (UndoRefused), keeping what it undid before it."""
        undone: list[dict[str, Any]] = []
        while self.changes and self.changes[-1]["point"] >= point:
            self._revert(self.changes[-1])
            undone.append(self.changes.pop())
        return undone
