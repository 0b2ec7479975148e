"""The policy engine (CONTRACT 1.3): specificity order, first matching rule with fall-through, fail-closed default,
conditions, and floors. `PolicySet.decide` is on every call's path, so candidates per (agent, tool) are cached, and
so is the decision itself where no condition can change it."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

import msgspec

from flux7.shared.globs import glob_match, is_exact
from flux7.shared.gofmt import go_v
from flux7.shared.settings import Condition, Policy, Rule

__all__ = ["STRICTNESS", "Decision", "Policy", "PolicySet", "condition_holds", "stricter"]

ActionName = Literal["allow", "deny", "human_approval"]
STRICTNESS = {"allow": 0, "human_approval": 1, "deny": 2}


class Decision(msgspec.Struct, frozen=True):
    action: str
    rule: str
    reason: str
    approvals: int = 1  # a human_approval's four eyes: how many distinct humans must approve


DEFAULT_DENY = Decision("deny", "default", "no matching policy — fail closed")


def stricter(a: Decision, b: Decision | None) -> Decision:
    """The stricter of a policy decision and a floor, ordered deny > human_approval > allow."""
    if b is None:
        return a
    return b if STRICTNESS[b.action] > STRICTNESS[a.action] else a


def _specificity(policy: Policy) -> int:
    if policy.agent == "*":
        return 2
    return 0 if is_exact(policy.agent) else 1


def _lookup(arguments: Any, field: str) -> tuple[bool, Any]:
    value = arguments
    for part in field.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return False, None
    return True, value


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


_STRING_OPS = {"contains", "not_contains", "starts_with", "not_starts_with"}
_NUMERIC_OPS = {"<", "<=", ">", ">=", "==", "!="}


def condition_holds(cond: Condition, arguments: Any) -> bool:
    found, field_value = _lookup(arguments, cond.field)
    if not found:
        return False
    op = cond.operator
    if op in _STRING_OPS:
        text = go_v(field_value)
        wanted = cond.value if isinstance(cond.value, list) else [cond.value]
        needles = [go_v(w) for w in wanted]
        if op == "contains":
            return any(n in text for n in needles)
        if op == "not_contains":
            return not any(n in text for n in needles)
        if op == "starts_with":
            return any(text.startswith(n) for n in needles)
        return not any(text.startswith(n) for n in needles)
    if op not in _NUMERIC_OPS:
        return False
    if isinstance(cond.value, list):
        # A list value means "any of" (for != : "none of").
        results = [condition_holds(Condition(field=cond.field, operator=op, value=v), arguments) for v in cond.value]
        return all(results) if op == "!=" else any(results)
    left, right = _number(field_value), _number(cond.value) if not isinstance(cond.value, str) else None
    if left is not None and right is not None:
        return {
            "<": left < right,
            "<=": left <= right,
            ">": left > right,
            ">=": left >= right,
            "==": left == right,
            "!=": left != right,
        }[op]
    if op in ("==", "!="):
        equal = go_v(field_value) == go_v(cond.value)
        return equal if op == "==" else not equal
    return False


class _Candidate(msgspec.Struct, frozen=True):
    policy: str
    rule: Rule
    index: int


class PolicySet:
    """An immutable, ordered set of policies. Build a new one to reload."""

    _CACHE_SIZE = 8192

    def __init__(self, policies: tuple[Policy, ...] | list[Policy], version: str = "") -> None:
        self.policies: tuple[Policy, ...] = tuple(sorted(policies, key=_specificity))  # sorted() is stable
        self.by_name = {p.name: p for p in self.policies}
        self.version = version
        self._cache: OrderedDict[tuple[str, str], tuple[_Candidate, ...]] = OrderedDict()
        # The decision for (agent, tool) when no condition can change it (its deciding rule has none and no
        # conditional rule comes first): the arguments need not be looked at. A reload builds a new set.
        self._fixed: dict[tuple[str, str], Decision] = {}

    def _candidates(self, agent: str, tool: str) -> tuple[_Candidate, ...]:
        key = (agent, tool)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        found: list[_Candidate] = []
        for policy in self.policies:
            if not glob_match(policy.agent, agent):
                continue
            for i, rule in enumerate(policy.rules):
                if any(glob_match(t, tool) for t in rule.tools):
                    found.append(_Candidate(policy.name, rule, i))
                    if rule.condition is None:
                        break  # later rules of this policy can never decide
            else:
                continue
            if found and found[-1].rule.condition is None and found[-1].policy == policy.name:
                break  # an unconditional match decides; later policies are never reached
        result = tuple(found)
        self._cache[key] = result
        if len(self._cache) > self._CACHE_SIZE:
            self._cache.popitem(last=False)
        return result

    def decide(self, agent: str, tool: str, arguments: Any = None) -> Decision:
        key = (agent, tool)
        fixed = self._fixed.get(key)
        if fixed is not None:
            return fixed
        candidates = self._candidates(agent, tool)
        for cand in candidates:
            cond = cand.rule.condition
            if cond is None or condition_holds(cond, arguments):
                action = cand.rule.action
                decision = Decision(
                    action, cand.policy, f"policy={cand.policy} tool={tool} action={action}", cand.rule.approvals
                )
                if cand is candidates[0] and cond is None:
                    self._remember(key, decision)
                return decision
        if not candidates:
            self._remember(key, DEFAULT_DENY)
        return DEFAULT_DENY

    def _remember(self, key: tuple[str, str], decision: Decision) -> None:
        if len(self._fixed) >= self._CACHE_SIZE:
            self._fixed.clear()
        self._fixed[key] = decision

    def deciding_rule(self, agent: str, tool: str, arguments: Any = None) -> tuple[str, int] | None:
        """(policy name, rule index) of the rule that decides, or None for the default."""
        for cand in self._candidates(agent, tool):
            if cand.rule.condition is None or condition_holds(cand.rule.condition, arguments):
                return cand.policy, cand.index
        return None

    def conditional(self, agent: str, tool: str) -> list[dict[str, str]]:
        """The conditional rules that could decide this tool for this agent (for /tools/decisions)."""
        return [
            {
                "action": c.rule.action,
                "rule": c.policy,
                "field": c.rule.condition.field,
                "operator": c.rule.condition.operator,
            }
            for c in self._candidates(agent, tool)
            if c.rule.condition is not None
        ]

    def can_only_deny(self, agent: str, tool: str) -> bool:
        cands = self._candidates(agent, tool)
        if not cands:
            return True
        return all(c.rule.action == "deny" for c in cands)

    def to_wire(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for p in self.policies:
            item: dict[str, Any] = {"name": p.name, "agent": p.agent}
            if p.rate_limit is not None:
                item["rate_limit"] = msgspec.to_builtins(p.rate_limit)
            if p.tool_limits:
                item["tool_limits"] = [msgspec.to_builtins(t) for t in p.tool_limits]
            item["rules"] = [msgspec.to_builtins(r, builtin_types=None) for r in p.rules]
            for r in item["rules"]:
                if r.get("condition") is None:
                    r.pop("condition", None)
                if r.get("approvals") == 1:
                    r.pop("approvals")
            if p.source_file:
                item["source_file"] = p.source_file
            out.append(item)
        return out
