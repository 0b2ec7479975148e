"""Permission rules: what the user allowed or denied once and for all, so the agent does not ask again.

Rules live in the user's `agent.toml` and a trusted project's `.flux7/agent.toml` (an untrusted project's are
ignored like its other settings), and are added by an "always" answer at a confirmation:

    [permissions]
    allow = ["shell(git status*)", "edit_file(src/**)", "read_file"]
    deny = ["shell(git push*)", "web_fetch"]

A rule is a tool name (a glob: `fs.*`) and, for some tools, a pattern in parentheses: a command for `shell` (a
glob over each simple command of the line, `*` matching anything), a path for tools with a `path` argument (a
gitignore pattern relative to the project's folder: `src/**`; a tool-wide allow such as `write_file` covers the
project's files only, a path outside must be named: `/srv/notes/**`), a URL for `web_fetch`. They are judged in the
local gate, after the safety layer:

- a deny rule refuses the call, in every mode (yolo included);
- an allow rule answers the approval mode's question (`on-request` asking before an edit) with yes. It never
  lifts a refusal of the safety layer, nor the questions every mode asks (no sandbox for shell, an edit of
  `.flux7/` or `.git/hooks`), nor gives a command the network a typed yes would; and the mesh still decides
  after it (a mesh deny stays a deny).

An allowed shell line must be made only of simple commands (chained by `|`, `&&`, `||`, `;`) each matching an
allow rule: `git status; rm -rf src` is not allowed by `shell(git status*)`."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from flux7.shared.agent.commands import simple_commands, under

__all__ = ["Permissions", "Rule", "parse_rule", "remove_rule", "save_rule", "suggested_rules"]

_RULE = re.compile(r"^(?P<tool>[A-Za-z0-9_.*?/-]{1,128})(?:\((?P<spec>.*)\))?$", re.S)


@dataclass(frozen=True)
class Rule:
    action: str  # allow | deny
    text: str  # as written: `shell(git status*)`
    source: str  # the file it is saved in
    tool: str
    spec: str | None

    def matches(self, tool: str, arguments: dict[str, Any], cwd: Path, root: Path) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        path = arguments.get("path")
        if self.spec is None:
            # A tool-wide allow covers the project's files; a path outside it must be named (`/abs/**`) to be allowed.
            return self.action == "deny" or not isinstance(path, str) or under(_resolve(cwd, path), root.resolve())
        if tool == "shell":
            return _command_matches(self.spec, str(arguments.get("command") or ""), deny=self.action == "deny")
        if tool == "web_fetch":
            return fnmatch.fnmatchcase(str(arguments.get("url") or ""), self.spec)
        if not isinstance(path, str):
            return False
        return _path_matches(self.spec, _resolve(cwd, path), root.resolve())


def _resolve(cwd: Path, path: str) -> Path:
    return (cwd / Path(path).expanduser()).resolve()


def parse_rule(text: str, action: str, source: str) -> Rule:
    """A rule from its text; ValueError says what is wrong."""
    m = _RULE.match(text.strip())
    if m is None or (m.group("spec") is not None and not m.group("spec").strip()):
        raise ValueError(f"{text!r} is not a rule: write a tool name, or tool(pattern) as in shell(git status*)")
    return Rule(action, text.strip(), source, m.group("tool"), m.group("spec"))


def _command_matches(spec: str, command: str, *, deny: bool) -> bool:
    parts = simple_commands(command)
    if parts is None:
        # Unreadable: an allow rule cannot vouch for it; a deny rule still catches its literal start (fail closed).
        literal = re.split(r"[*?\[]", spec, maxsplit=1)[0].strip()
        return deny and bool(literal) and literal in " ".join(command.split())
    if deny:
        return any(fnmatch.fnmatchcase(p, spec) for p in parts) or fnmatch.fnmatchcase(command, spec)
    return bool(parts) and all(fnmatch.fnmatchcase(p, spec) for p in parts)


def _path_matches(spec: str, path: Path, root: Path) -> bool:
    if spec.startswith(("/", "~")):
        base = Path(spec).expanduser()
        rel_spec = base.as_posix().lstrip("/")
        return pathspec.GitIgnoreSpec.from_lines([rel_spec]).match_file(path.as_posix().lstrip("/"))
    if not under(path, root):
        return False  # a relative pattern names paths inside the project only
    rel = path.relative_to(root).as_posix() if path != root else "."
    return pathspec.GitIgnoreSpec.from_lines([spec]).match_file(rel)


def _escaped(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def suggested_rules(tool: str, arguments: dict[str, Any], cwd: Path, root: Path) -> list[str]:
    """The narrowest rules that allow this call again (this command, this path): [] when none can."""
    if tool == "shell":
        parts = simple_commands(str(arguments.get("command") or ""))
        return [f"shell({_escaped(p)})" for p in dict.fromkeys(parts or [])]
    if tool == "web_fetch" and arguments.get("url"):
        return [f"web_fetch({_escaped(str(arguments['url']))})"]
    path = arguments.get("path")
    if isinstance(path, str):
        resolved = (cwd / Path(path).expanduser()).resolve()
        rel = resolved.relative_to(root.resolve()).as_posix() if under(resolved, root.resolve()) else str(resolved)
        return [f"{tool}({_escaped(rel)})"]
    return []


class Permissions:
    """The rules in force, deny before allow, and the files an answer saves new ones in."""

    def __init__(self, rules: Sequence[Rule], root: Path, save_to: Path) -> None:
        self.rules = list(rules)
        self.root = root
        self.save_to = save_to  # the trusted project's agent.toml, else the user's

    def decide(self, tool: str, arguments: dict[str, Any], cwd: Path) -> Rule | None:
        """The first deny rule matching the call, else the first allow rule, else None."""
        for action in ("deny", "allow"):
            for rule in self.rules:
                if rule.action == action and rule.matches(tool, arguments, cwd, self.root):
                    return rule
        if tool == "shell":  # each simple command allowed by one rule or another: `git status && ls`
            parts = simple_commands(str(arguments.get("command") or "")) or []
            found = [self._allowing(tool, {"command": p}, cwd) for p in parts]
            if found and all(found):
                return found[0]
        return None

    def _allowing(self, tool: str, arguments: dict[str, Any], cwd: Path) -> Rule | None:
        return next((r for r in self.rules if r.action == "allow" and r.matches(tool, arguments, cwd, self.root)), None)

    def add(self, action: str, texts: Sequence[str]) -> list[Rule]:
        """Save rules (allow or deny) in `save_to` and apply them from now on."""
        added = [parse_rule(t, action, str(self.save_to)) for t in texts]
        for rule in added:
            save_rule(self.save_to, action, rule.text)
            if not any(r.action == action and r.text == rule.text for r in self.rules):
                self.rules.append(rule)
        return added

    def remove(self, index: int) -> Rule:
        """Remove the rule listed at `index` (from 1) from its file and from what applies."""
        rule = self.rules[index - 1]
        remove_rule(Path(rule.source), rule.action, rule.text)
        del self.rules[index - 1]
        return rule


def _document(path: Path) -> Any:
    import tomlkit

    return tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()


def save_rule(path: Path, action: str, text: str) -> None:
    """Add `text` to `[permissions] <action>` in the TOML file `path` (created when missing; comments kept)."""
    import tomlkit

    doc = _document(path)
    table = doc.get("permissions")
    if table is None:
        table = tomlkit.table()
        doc["permissions"] = table
    rules = table.get(action)
    if rules is None:
        table[action] = tomlkit.array()
        rules = table[action]
    if text not in list(rules):
        rules.append(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def remove_rule(path: Path, action: str, text: str) -> None:
    import tomlkit

    doc = _document(path)
    rules = (doc.get("permissions") or {}).get(action)
    if rules is not None and text in list(rules):
        rules.remove(text)
        path.write_text(tomlkit.dumps(doc), encoding="utf-8")
