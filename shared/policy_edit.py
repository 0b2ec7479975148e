"""Editing policy files through the control plane: validated before writing, a `.bak` kept, reloaded after.

Per-tool edits (PUT /policies/{agent}/tools/{tool}) add or change an exact, unconditional rule for one tool in the
agent's own policy file, placed before the rule that decides the tool today. A conditional rule written for
exactly that tool is the author's logic and is left alone (409)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from .errors import BadRequest, ConfigError, Conflict, NotFound, NotImplementedFeature
from .globs import glob_match
from .policy_store import PolicyStore
from .settings import load_policy_dir

__all__ = ["PolicyFiles"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
EDIT_ACTIONS = ("allow", "deny", "human_approval", "inherit")


def _atomic_write(path: Path, text: str) -> str:
    backup = ""
    if path.exists():
        backup = str(path) + ".bak"
        shutil.copy2(path, backup)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return backup


class PolicyFiles:
    def __init__(self, store: PolicyStore) -> None:
        self.store = store

    @property
    def directory(self) -> Path:
        d = self.store.policy_dir
        if d is None:
            raise NotImplementedFeature("policy editing needs policy_dir in the config")
        return d

    def _path(self, name: str) -> Path:
        if name.endswith(".yaml"):
            name = name[:-5]
        if not _NAME.match(name):
            raise BadRequest(f"invalid policy file name {name!r}")
        return self.directory / f"{name}.yaml"

    def list(self) -> list[dict[str, str]]:
        return [{"name": f.stem, "file": str(f)} for f in sorted(self.directory.glob("*.yaml"))]

    def read(self, name: str) -> dict[str, str]:
        path = self._path(name)
        if not path.is_file():
            raise NotFound("policy file not found")
        return {"name": path.stem, "text": path.read_text()}

    def validate(self, name: str, text: str) -> None:
        """Raise BadRequest naming the key and fault, as the loader would at start."""
        try:
            self.store.validate_text(text, name)
            parsed = yaml.safe_load(text) or {}
        except ConfigError as e:
            raise BadRequest(f"{e.key}: {e.fault}", extra={"key": e.key}) from None
        others = {p.name for p in self.store.current.policies if Path(p.source_file or "").stem != name}
        if parsed.get("name") in others:
            raise BadRequest(f"duplicate policy name {parsed['name']!r}", extra={"key": "name"})

    def write(self, name: str, text: str) -> dict[str, Any]:
        self.validate(name, text)
        path = self._path(name)
        backup = _atomic_write(path, text)
        self.store.reload_if_changed(force=True)
        if self.store.last_error:
            raise BadRequest(self.store.last_error)
        out: dict[str, Any] = {"name": path.stem, "reloaded": True}
        if backup:
            out["backup"] = backup
        return out

    def set_tool_action(self, agent: str, tool: str, action: str) -> dict[str, Any]:
        if action not in EDIT_ACTIONS:
            raise BadRequest(f"action must be one of {', '.join(EDIT_ACTIONS)}")
        directory = self.directory
        own = [
            p
            for p in self.store.current.policies
            if p.agent == agent and p.source_file and Path(p.source_file).parent == directory
        ]
        if own:
            path = Path(own[0].source_file)
            data = yaml.safe_load(path.read_text()) or {}
        else:
            if action == "inherit":
                return {"agent": agent, "tool": tool, "action": action, "changed": False}
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", agent)
            path = directory / f"agent-{safe}.yaml"
            data = {"name": f"agent-{safe}", "agent": agent, "rules": []}
        rules: list[dict[str, Any]] = list(data.get("rules") or [])
        exact = [i for i, r in enumerate(rules) if list(r.get("tools") or []) == [tool]]
        for i in exact:
            if rules[i].get("condition"):
                raise Conflict(f"a hand-written conditional rule for {tool} decides here; edit {path.name} by hand")
        changed = True
        if exact:
            i = exact[0]
            if action == "inherit":
                rules.pop(i)
            elif rules[i].get("action") == action:
                changed = False
            else:
                rules[i] = {**rules[i], "action": action}
        elif action == "inherit":
            changed = False
        else:
            deciding = next(
                (i for i, r in enumerate(rules) if any(glob_match(t, tool) for t in (r.get("tools") or []))),
                len(rules),
            )
            rules.insert(deciding, {"tools": [tool], "action": action})
        out: dict[str, Any] = {
            "agent": agent,
            "tool": tool,
            "action": action,
            "changed": changed,
            "file": str(path),
        }
        if not changed:
            return out
        data["rules"] = rules
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        try:
            self.store.validate_text(text, path.stem)
        except ConfigError as e:  # pragma: no cover - an edit of a valid file stays valid
            raise BadRequest(str(e)) from None
        backup = _atomic_write(path, text)
        if backup:
            out["backup"] = backup
        self.store.reload_if_changed(force=True)
        load_policy_dir(directory)  # re-raise loudly if the directory as a whole no longer loads
        return out
