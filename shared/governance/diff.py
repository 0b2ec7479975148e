"""The diff engine: compare two versions of a policy file, a catalog file or an upstream tool definition and
classify each change as breaking, expanding (a security review item) or neutral, with the agents affected.

- breaking: a tool removed, a required parameter added, a parameter removed or its type narrowed, a
  permission narrowed for an agent that used the tool (from the graph's last 30 days);
- expanding: a new tool, a permission widened, an approval removed, a tool's hints turning it into a writer
  or destroyer, an agent declared or given more tools, upstreams or autonomy;
- neutral: everything else (descriptions, a permission narrowed for agents that never used the tool, ...)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flux7.shared.errors import ConfigError
from flux7.shared.gate.policy import STRICTNESS, PolicySet
from flux7.shared.governance.catalog import AUTONOMY, AgentEntry, parse_catalog
from flux7.shared.settings import Policy, parse_policy

__all__ = ["CLASSES", "catalog_changes", "policy_changes", "text_diff", "tool_changes"]

CLASSES = ("breaking", "expanding", "neutral")
Used = Callable[[str, str], bool]  # did `agent` call `tool` in the last 30 days


def _change(cls: str, kind: str, subject: str, detail: str, agents: Iterable[str] = ()) -> dict[str, Any]:
    return {"class": cls, "kind": kind, "subject": subject, "detail": detail, "affected_agents": sorted(set(agents))}


def text_diff(old: str, new: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"{name} (before)", f"{name} (after)"
        )
    )


def ordered(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Breaking first, then expanding, then neutral."""
    return sorted(changes, key=lambda c: (CLASSES.index(c["class"]), c["subject"], c["kind"]))


# -- tool definitions ------------------------------------------------------------------------------------------


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    t = schema.get("type")
    if isinstance(t, list):
        found = {str(x) for x in t}
    elif isinstance(t, str):
        found = {t}
    else:
        found = set()
    if "number" in found:
        found.add("integer")  # number accepts integers: number -> integer is a narrowing
    return found


def _narrowed(old: Any, new: Any) -> str:
    """Why the new property schema accepts less than the old one ('' when it does not)."""
    ot, nt = _types(old), _types(new)
    if ot and nt and not ot <= nt:
        return f"type {sorted(ot)} -> {sorted(nt)}"
    if isinstance(old, dict) and isinstance(new, dict):
        oe, ne = old.get("enum"), new.get("enum")
        if isinstance(ne, list) and (not isinstance(oe, list) or not set(map(str, oe)) <= set(map(str, ne))):
            return f"enum {oe} -> {ne}"
        for key, tighter in (("maxLength", min), ("maximum", min), ("minLength", max), ("minimum", max)):
            if key in new and (key not in old or tighter(old[key], new[key]) == new[key] != old[key]):
                return f"{key} {old.get(key)} -> {new[key]}"
    return ""


def _load_def(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_changes(name: str, old_text: str, new_text: str, users: Iterable[str]) -> list[dict[str, Any]]:
    """Classified changes between two tool definitions (ToolDef.fingerprint_text); '' means absent."""
    users = sorted(set(users))
    if old_text and not new_text:
        return [_change("breaking", "tool_removed", name, "the tool is gone", users)]
    if new_text and not old_text:
        return [_change("expanding", "tool_added", name, "a new tool", users)]
    old, new = _load_def(old_text), _load_def(new_text)
    out: list[dict[str, Any]] = []
    os_, ns = old.get("input_schema") or {}, new.get("input_schema") or {}
    oprops, nprops = os_.get("properties") or {}, ns.get("properties") or {}
    oreq, nreq = set(os_.get("required") or []), set(ns.get("required") or [])
    for p in sorted(nreq - oreq):
        out.append(_change("breaking", "required_param_added", f"{name}.{p}", f"parameter {p} is now required", users))
    for p in sorted(set(oprops) - set(nprops)):
        out.append(_change("breaking", "param_removed", f"{name}.{p}", f"parameter {p} removed", users))
    for p in sorted(set(nprops) - set(oprops)):
        if p not in nreq:
            out.append(_change("neutral", "optional_param_added", f"{name}.{p}", f"optional parameter {p}", users))
    for p in sorted(set(oprops) & set(nprops)):
        why = _narrowed(oprops[p], nprops[p])
        if why:
            out.append(_change("breaking", "type_narrowed", f"{name}.{p}", why, users))
        elif oprops[p] != nprops[p]:
            out.append(_change("neutral", "param_changed", f"{name}.{p}", "schema changed (not narrowed)", users))
    for p in sorted(oreq - nreq):
        out.append(_change("neutral", "param_optional", f"{name}.{p}", f"parameter {p} no longer required", users))
    oa, na = old.get("annotations") or {}, new.get("annotations") or {}
    if oa.get("readOnlyHint") is True and na.get("readOnlyHint") is not True:
        out.append(_change("expanding", "no_longer_read_only", name, "readOnlyHint dropped: the tool may write", users))
    if oa.get("destructiveHint") is not True and na.get("destructiveHint") is True:
        out.append(_change("expanding", "destructive", name, "destructiveHint=true: the tool may destroy", users))
    if oa.get("openWorldHint") is not True and na.get("openWorldHint") is True:
        out.append(_change("expanding", "open_world", name, "openWorldHint=true: reaches outside systems", users))
    for key in ("description", "title", "output_schema"):
        if old.get(key) != new.get(key):
            out.append(_change("neutral", f"{key}_changed", name, f"{key} changed", users))
    return out


# -- policies --------------------------------------------------------------------------------------------------


def policy_set_of(texts: dict[str, str], base: Iterable[Policy], directory: Path) -> PolicySet:
    """A PolicySet from policy files' texts (name -> YAML; '' skipped) plus the config's inline policies."""
    policies = list(base)
    for name, text in sorted(texts.items()):
        if text:
            policies.append(parse_policy(text, str(directory / name)))
    names = [p.name for p in policies]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(str(directory), "name", f"duplicate policy name {dup!r}")
    return PolicySet(policies)


def policy_changes(
    before: PolicySet, after: PolicySet, agents: Iterable[str], tools: Iterable[str], used: Used
) -> list[dict[str, Any]]:
    """Every (agent, tool) whose action with empty arguments changes, classified."""
    out: list[dict[str, Any]] = []
    for agent in sorted(set(agents)):
        for tool in sorted(set(tools)):
            a, b = before.decide(agent, tool, {}), after.decide(agent, tool, {})
            if a.action == b.action:
                continue
            subject = f"{agent} -> {tool}"
            detail = f"{a.action} ({a.rule}) -> {b.action} ({b.rule})"
            if STRICTNESS[b.action] > STRICTNESS[a.action]:
                cls = "breaking" if used(agent, tool) else "neutral"
                kind = "permission_narrowed" if cls == "breaking" else "permission_narrowed_unused"
            elif a.action == "human_approval" and b.action == "allow":
                cls, kind = "expanding", "approval_removed"
            else:
                cls, kind = "expanding", "permission_widened"
            out.append(_change(cls, kind, subject, detail, [agent]))
    return out


# -- catalog ---------------------------------------------------------------------------------------------------


def _entries(text: str, name: str) -> dict[str, AgentEntry]:
    return {e.id: e for e in parse_catalog(text, name)} if text else {}


def catalog_changes(name: str, old_text: str, new_text: str, used: Used) -> list[dict[str, Any]]:
    old, new = _entries(old_text, name), _entries(new_text, name)
    out: list[dict[str, Any]] = []
    for eid in sorted(new.keys() - old.keys()):
        out.append(_change("expanding", "agent_declared", eid, "a new catalog entry", [eid]))
    for eid in sorted(old.keys() - new.keys()):
        out.append(_change("neutral", "agent_undeclared", eid, "the catalog entry was removed", [eid]))
    for eid in sorted(old.keys() & new.keys()):
        o, n = old[eid], new[eid]
        for field in ("tools", "upstreams", "sub_agents", "data_classes"):
            added = sorted(set(getattr(n, field)) - set(getattr(o, field)))
            removed = sorted(set(getattr(o, field)) - set(getattr(n, field)))
            if added:
                out.append(_change("expanding", f"{field}_added", eid, f"{field} + {', '.join(added)}", [eid]))
            for item in removed:
                cls = "breaking" if field == "tools" and used(eid, item) else "neutral"
                out.append(_change(cls, f"{field}_removed", eid, f"{field} - {item}", [eid]))
        if AUTONOMY.index(n.autonomy) > AUTONOMY.index(o.autonomy):
            out.append(_change("expanding", "autonomy_raised", eid, f"{o.autonomy or '-'} -> {n.autonomy}", [eid]))
        elif n.autonomy != o.autonomy:
            out.append(
                _change("neutral", "autonomy_lowered", eid, f"{o.autonomy or '-'} -> {n.autonomy or '-'}", [eid])
            )
        for field in ("name", "owner", "team", "purpose", "environment", "model", "lifecycle"):
            if getattr(o, field) != getattr(n, field):
                out.append(
                    _change(
                        "neutral",
                        f"{field}_changed",
                        eid,
                        f"{field}: {getattr(o, field)!r} -> {getattr(n, field)!r}",
                        [eid],
                    )
                )
    return out
