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

from flux7.shared.errors import BadRequest, ConfigError, Conflict, NotFound, NotImplementedFeature
from flux7.shared.gate.policy_store import PolicyStore
from flux7.shared.globs import glob_match
from flux7.shared.safe_yaml import load_yaml

__all__ = ["PolicyFiles"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
EDIT_ACTIONS = ("allow", "deny", "human_approval", "inherit")


def _atomic_write(path: Path, data: str | bytes) -> str:
    backup = ""
    if path.exists():
        backup = str(path) + ".bak"
        shutil.copy2(path, backup)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)
    return backup


def _undo(path: Path, backup: str) -> None:
    """Put back what `_atomic_write` replaced (or remove what it created)."""
    if backup:
        shutil.copy2(backup, path)
    else:
        path.unlink(missing_ok=True)


def _stem(name: str) -> str:
    """The file's name without `.yaml`: every route takes either spelling."""
    stem = name.removesuffix(".yaml")
    if not _NAME.fullmatch(stem):
        raise BadRequest(f"invalid policy file name {stem!r}")
    return stem


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
        return self.directory / f"{_stem(name)}.yaml"

    def list(self) -> list[dict[str, str]]:
        return [{"name": f.stem, "file": str(f)} for f in sorted(self.directory.glob("*.yaml"))]

    def read(self, name: str) -> dict[str, str]:
        path = self._path(name)
        if not path.is_file():
            raise NotFound("policy file not found")
        try:
            return {"name": path.stem, "text": path.read_bytes().decode("utf-8")}
        except UnicodeDecodeError:
            raise Conflict(f"{path.name} is not valid UTF-8; fix it on disk") from None

    def validate(self, name: str, data: str | bytes) -> None:
        """Raise BadRequest naming the key and fault, as the loader would at start (also for a file that is
        too big, nested too deep or not UTF-8: shared/safe_yaml.py)."""
        self._path(name)  # a bad name is refused before the content is parsed
        name = _stem(name)  # `pets.yaml` and `pets` are one file, as for reads
        try:
            policy = self.store.validate_text(data, name)
        except ConfigError as e:
            raise BadRequest(f"{e.key}: {e.fault}", extra={"key": e.key}) from None
        others = {p.name for p in self.store.current.policies if Path(p.source_file or "").stem != name}
        if policy.name in others:
            raise BadRequest(f"duplicate policy name {policy.name!r}", extra={"key": "name"})

    def write(self, name: str, data: str | bytes) -> dict[str, Any]:
        """Validate, write (keeping a `.bak`), reload. Nothing stays written when any step refuses it."""
        with self.store.editing():
            return self._write(name, data)

    def _write(self, name: str, data: str | bytes) -> dict[str, Any]:
        self.validate(name, data)
        path = self._path(name)
        backup = _atomic_write(path, data)
        self.store.reload_if_changed(force=True)
        if self.store.last_error:
            error = self.store.last_error
            _undo(path, backup)  # the set as a whole did not load: the file goes back to what it was
            self.store.reload_if_changed(force=True)
            raise BadRequest(error)
        out: dict[str, Any] = {"name": path.stem, "reloaded": True}
        if backup:
            out["backup"] = backup
        return out

    def set_tool_action(self, agent: str, tool: str, action: str) -> dict[str, Any]:
        if action not in EDIT_ACTIONS:
            raise BadRequest(f"action must be one of {', '.join(EDIT_ACTIONS)}")
        with self.store.editing():
            return self._set_tool_action(agent, tool, action)

    def _set_tool_action(self, agent: str, tool: str, action: str) -> dict[str, Any]:
        directory = self.directory
        own = [
            p
            for p in self.store.current.policies
            if p.agent == agent and p.source_file and Path(p.source_file).parent == directory
        ]
        if own:
            path = Path(own[0].source_file)
            try:
                data = load_yaml(path.read_bytes(), str(path)) or {}
            except ConfigError as e:
                raise Conflict(f"{path.name} does not load ({e.key}: {e.fault}); fix it by hand") from None
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
        self.store.reload_if_changed(force=True)
        if self.store.last_error:  # another file of the directory does not load: undo, say which
            error = self.store.last_error
            _undo(path, backup)
            self.store.reload_if_changed(force=True)
            raise Conflict(f"the policy directory does not load, nothing changed: {error}")
        if backup:
            out["backup"] = backup
        return out
