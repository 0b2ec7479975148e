"""sup7 rules: `<dotted path> <op> <value>` conditions over an approval, first match wins (CONTRACT 3).

Comparisons are lower-cased. The value `project_dir` means "inside one of project_dirs"; unlike the reference,
the path is normalised first and must sit under a directory (not merely share its prefix), so
`/proj/../etc/passwd` and `/project-other` are not inside `/proj`. A list (a CLI tool's `params.args`) is inside
when every argument that is not a flag is."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from flux7.shared.gofmt import go_v

__all__ = ["OPERATORS", "Condition", "RuleConfig", "RuleEngine", "RuleMatch", "parse_condition"]

OPERATORS = ("starts_with", "equals", "contains", "not_equals", "==", "!=")
_NEGATED = ("not_equals", "!=")


class RuleConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One rule of sup7.yaml's `rules` (validated with the rest of the file, shared/supervisor/config.py)."""

    name: str
    condition: str | None = None
    action: Literal["approve", "deny", "escalate"] = "escalate"
    confidence: float = 0.9
    description: str = ""


@dataclass(frozen=True)
class Condition:
    path: str
    op: str
    value: str

    def holds(self, context: dict[str, Any], project_dirs: Sequence[str]) -> bool:
        found, left = _resolve(context, self.path)
        if not found or left is None:
            return False  # a missing field never matches, not even `!=`
        if self.value == "project_dir":
            inside = _all_inside(left, project_dirs)
            return not inside if self.op in _NEGATED else inside
        text = _render(left)
        left_l, right_l = text.lower(), self.value.lower()
        if self.op in ("equals", "=="):
            return left_l == right_l
        if self.op in _NEGATED:
            return left_l != right_l
        if self.op == "starts_with":
            return left_l.startswith(right_l)
        return right_l in left_l  # contains


def parse_condition(text: str) -> Condition:
    """Parse `<path> <op> <value>`. Raises ValueError naming what is wrong."""
    parts = text.split()
    for i, part in enumerate(parts):
        if part in OPERATORS:
            if i == 0:
                raise ValueError(f"condition {text!r} has no path before {part!r}")
            value = " ".join(parts[i + 1 :])
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            if not value:
                raise ValueError(f"condition {text!r} has no value after {part!r}")
            return Condition(path=".".join(parts[:i]), op=part, value=value)
    raise ValueError(f"condition {text!r} has no operator (one of {', '.join(OPERATORS)})")


def _resolve(context: Any, path: str) -> tuple[bool, Any]:
    current = context
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


def _render(value: Any) -> str:
    return value if isinstance(value, str) else go_v(value)


def _all_inside(value: Any, dirs: Sequence[str]) -> bool:
    """A path inside a project dir; for a list (a CLI tool's `args`), every argument that is not a flag is one
    such path, and there is at least one: `["-p", "/proj/a"]` is inside, `["/proj/a", "/etc"]` is not."""
    if isinstance(value, list):
        paths = [v for v in value if not (isinstance(v, str) and v.startswith("-"))]
        return bool(paths) and all(isinstance(v, str) and _inside_any(v, dirs) for v in paths)
    return _inside_any(_render(value), dirs)


def _inside_any(path: str, dirs: Sequence[str]) -> bool:
    if not path:
        return False
    norm = posixpath.normpath(path).lower()
    for d in dirs:
        base = posixpath.normpath(d).lower()
        if norm == base or norm.startswith(base.rstrip("/") + "/"):
            return True
    return False


@dataclass(frozen=True)
class RuleMatch:
    rule: str
    action: str  # approve | deny | escalate
    confidence: float
    reasoning: str
    catch_all: bool  # the unconditional last rule: the LLM's turn, when one is configured


class RuleEngine:
    def __init__(self, rules: Sequence[RuleConfig], project_dirs: Sequence[str]) -> None:
        self._rules = [(r, parse_condition(r.condition) if r.condition else None) for r in rules]
        self._dirs = tuple(project_dirs)

    def evaluate(self, context: dict[str, Any]) -> RuleMatch | None:
        """The first rule whose condition holds; None only when no rule matches (no catch-all configured)."""
        for rule, condition in self._rules:
            if condition is None or condition.holds(context, self._dirs):
                return RuleMatch(
                    rule=rule.name,
                    action=rule.action,
                    confidence=rule.confidence,
                    reasoning=_reasoning(rule, condition, context),
                    catch_all=condition is None,
                )
        return None

    def trail(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rule tried, in order, up to and including the first that matched: what a reviewer is shown."""
        out: list[dict[str, Any]] = []
        for rule, condition in self._rules:
            matched = condition is None or condition.holds(context, self._dirs)
            out.append({"rule": rule.name, "condition": rule.condition, "action": rule.action, "matched": matched})
            if matched:
                break
        return out


def _reasoning(rule: RuleConfig, condition: Condition | None, context: dict[str, Any]) -> str:
    parts = [f"rule '{rule.name}' matched"]
    if condition is not None and condition.path.startswith("params."):
        params = context.get("params")
        path = params.get("path") if isinstance(params, dict) else None
        args = params.get("args") if isinstance(params, dict) else None
        if isinstance(path, str) and path:
            parts.append(f"path={path}")
        elif isinstance(args, list) and args:
            parts.append(f"args={' '.join(map(str, args))}")
    if rule.description:
        parts.append(rule.description)
    return "; ".join(parts)
