"""Sessions saved as they go: one JSON file per session under the sessions folder, rewritten (atomically) after
every message, so quitting at any moment loses nothing already said.

A session's id is also the mesh session id (`X-Session-Id`) its calls carry, so a resumed session continues the
same timeline in the mesh's traces and the console. `--continue` picks the newest session started in the same
working directory; `--resume ID` any session by id (or a unique prefix of it).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flux7.shared.agent.conversation import Message, ToolCall, ToolResult, close_dangling

__all__ = ["Session", "SessionError", "SessionStore"]

_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class SessionError(Exception):
    """A session that cannot be found, read or written."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class Session:
    id: str  # also the mesh session id
    cwd: str
    provider: str = ""
    model: str = ""
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    messages: list[Message] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # tool, arguments, gate, policy, trace id
    prompts: int = 0  # prompts run so far (a checkpoint names the one that made it)
    cost_usd: float = 0.0  # what the model's tokens cost, when its price is known
    checkpoints: list[dict[str, Any]] = field(default_factory=list)  # each write and edit (shared/agent/checkpoints.py)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "mesh_session_id": self.id,
            "cwd": self.cwd,
            "provider": self.provider,
            "model": self.model,
            "created": self.created,
            "updated": self.updated,
            "messages": [asdict(m) for m in self.messages],
            "usage": self.usage,
            "tool_calls": self.tool_calls,
            "prompts": self.prompts,
            "cost_usd": self.cost_usd,
            "checkpoints": self.checkpoints,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Session:
        """A saved session; a tool call saved without its result (the agent was killed, or interrupted at a
        confirmation, while it was pending) is answered as not run, so every provider accepts the conversation."""
        messages = [
            Message(
                m["role"],
                m.get("text", ""),
                tool_calls=[ToolCall(**c) for c in m.get("tool_calls", [])],
                results=[ToolResult(**r) for r in m.get("results", [])],
            )
            for m in data.get("messages", [])
        ]
        close_dangling(messages)
        return cls(
            id=str(data["id"]),
            cwd=str(data.get("cwd", "")),
            provider=str(data.get("provider", "")),
            model=str(data.get("model", "")),
            created=str(data.get("created", "")),
            updated=str(data.get("updated", "")),
            messages=messages,
            usage={k: int(v) for k, v in (data.get("usage") or {}).items()},
            tool_calls=list(data.get("tool_calls", [])),
            prompts=int(data.get("prompts") or 0),
            cost_usd=float(data.get("cost_usd") or 0.0),
            checkpoints=list(data.get("checkpoints") or []),
        )

    def preview(self) -> str:
        first = next((m.text for m in self.messages if m.role == "user"), "")
        return " ".join(first.split())[:60]


class SessionStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, session_id: str) -> Path:
        if not _ID.match(session_id):
            raise SessionError(f"not a session id: {session_id!r}")
        return self.folder / f"{session_id}.json"

    def save(self, session: Session) -> None:
        self.write(session.id, self.encode(session))

    def encode(self, session: Session) -> bytes:
        """The session as it is now (quick: the slow part, the file, is `write`)."""
        session.updated = _now()
        return json.dumps(session.to_json(), ensure_ascii=False, indent=1).encode()

    def write(self, session_id: str, data: bytes) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".session-", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path(session_id))  # a crash mid-write leaves the previous save whole
        except OSError as e:
            raise SessionError(f"cannot save session {session_id} in {self.folder}: {e.strerror or e}") from e

    def load(self, session_id: str) -> Session:
        path = self.path(session_id)
        if not path.is_file():
            matches = [s for s in self.list() if s.id.startswith(session_id)]
            if len(matches) != 1:
                raise SessionError(
                    f"no saved session {session_id!r}" if not matches else f"{session_id!r} names several sessions"
                )
            path = self.path(matches[0].id)
        try:
            return Session.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SessionError(f"cannot read session file {path}: {e}") from e

    def list(self) -> list[Session]:
        """Every readable saved session, newest first."""
        found: list[Session] = []
        if not self.folder.is_dir():
            return found
        for path in self.folder.glob("*.json"):
            try:
                found.append(Session.from_json(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged file is skipped here; loading it by id says why
        return sorted(found, key=lambda s: s.updated, reverse=True)

    def latest(self, cwd: Path | None = None) -> Session | None:
        """The newest session (started in `cwd` when given)."""
        for s in self.list():
            if cwd is None or Path(s.cwd) == cwd:
                return s
        return None
