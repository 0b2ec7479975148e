"""The three axes, each 0-100 with the evidence that produced it (docs/governance.md "Scores").

- capability: what the agent may do without a human (higher = more power): every tool the pipeline would allow
  it with empty arguments, weighted by kind, plus allowing wildcard rules and open grants;
- behaviour: what it did over the window (100 = nothing to report), penalties per event kind, each capped;
- hygiene: how well it is governed (100 = nothing to fix), penalties per gap, each capped."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from flux7.shared.globs import glob_match, is_exact
from flux7.shared.governance.catalog import AgentEntry
from flux7.shared.upstreams.base import ToolDef

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["KIND_WEIGHTS", "Axes", "tool_kind"]

KIND_WEIGHTS = {"destructive": 25, "external": 15, "write": 10, "read": 2}
WILDCARD_WEIGHT = 10
GRANT_WEIGHT = 10
# behaviour: (points per event, cap) per event kind
BEHAVIOUR_PENALTIES = {
    "denials": (5, 30),
    "approvals_refused": (10, 30),
    "rate_limited": (5, 20),
    "loops": (10, 30),
    "injection": (20, 40),
    "upstream_errors": (2, 20),
    "undeclared_calls": (5, 30),
}
LONG_GRANT_SECONDS = 24 * 3600


def tool_kind(tool: ToolDef) -> tuple[str, str]:
    """(destructive | external | write | read, why) from MCP annotations, HTTP method, CLI declaration and the
    classifier. A tool with no signal counts as write: unknown is not harmless."""
    ann = tool.annotations or {}
    if ann.get("destructiveHint") is True:
        return "destructive", "annotation destructiveHint=true"
    if tool.method.upper() == "DELETE":
        return "destructive", "HTTP DELETE"
    cli = tool.cli_meta or {}
    if cli.get("destructive") is True:
        return "destructive", "CLI declaration destructive"
    if ann.get("openWorldHint") is True:
        return "external", "annotation openWorldHint=true"
    if tool.classification.access == "read":
        return "read", "; ".join(tool.classification.reasons) or "read"
    if tool.classification.access == "write":
        return "write", "; ".join(tool.classification.reasons) or "write"
    return "write", "no read signal (unknown counts as write)"


def _penalty(points: int, count: int, cap: int) -> int:
    return min(cap, points * count)


class Axes:
    """Computes the three axes for one agent from the mesh's current state and the activity window."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh

    def _agent_rules(self, agent: str) -> list[dict[str, Any]]:
        """Every rule whose policy applies to the agent, with whether its tool globs are wildcards."""
        out = []
        for p in self.mesh.policies.current.policies:
            if not glob_match(p.agent, agent):
                continue
            for i, r in enumerate(p.rules):
                wild = [t for t in r.tools if not is_exact(t)]
                out.append({"policy": p.name, "index": i, "action": r.action, "wildcards": wild})
        return out

    def capability(self, agent: str) -> tuple[int, dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        destructive = 0
        score = 0
        current = self.mesh.policies.current
        for tool in self.mesh.registry.tools():
            decision = self.mesh.pipeline.decider.evaluate(agent, tool.name, {}, tool)
            conditional = any(c["action"] == "allow" for c in current.conditional(agent, tool.name))
            if decision.action != "allow" and not conditional:
                continue
            kind, why = tool_kind(tool)
            weight = KIND_WEIGHTS[kind] if decision.action == "allow" else KIND_WEIGHTS[kind] // 2
            destructive += int(kind == "destructive" and decision.action == "allow")
            score += weight
            tools.append(
                {
                    "tool": tool.name,
                    "kind": kind,
                    "why": why,
                    "weight": weight,
                    "rule": decision.rule,
                    "conditional": decision.action != "allow",
                }
            )
        wild = [r for r in self._agent_rules(agent) if r["wildcards"] and r["action"] == "allow"]
        grants = self.mesh.grants.active_for_agent(agent)
        score += WILDCARD_WEIGHT * len(wild) + GRANT_WEIGHT * len(grants)
        evidence = {
            "allowed_tools": tools,
            "wildcard_allow_rules": [f"{r['policy']}[{r['index']}] {','.join(r['wildcards'])}" for r in wild],
            "open_grants": [g.id for g in grants],
            "destructive_allowed": destructive,
        }
        return min(100, score), evidence

    def behaviour(
        self, agent: str, used: dict[str, dict[str, int]], entry: AgentEntry | None, evidence_of: Any
    ) -> tuple[int, dict[str, Any]]:
        counts = {k: 0 for k in BEHAVIOUR_PENALTIES}
        calls = 0
        undeclared_tools: list[str] = []
        for tool, c in used.items():
            calls += c["calls"]
            for k in BEHAVIOUR_PENALTIES:
                if k in c:
                    counts[k] += c[k]
            if entry is not None and not any(glob_match(g, tool) for g in entry.tools):
                counts["undeclared_calls"] += c["calls"]
                undeclared_tools.append(tool)
        penalties = {k: _penalty(p, counts[k], cap) for k, (p, cap) in BEHAVIOUR_PENALTIES.items()}
        evidence: dict[str, Any] = {"calls": calls, "counts": counts, "penalties": penalties}
        evidence["undeclared_tools"] = sorted(undeclared_tools)
        evidence["traces"] = {k: evidence_of(k) for k, n in counts.items() if n and k != "undeclared_calls"}
        return max(0, 100 - sum(penalties.values())), evidence

    def hygiene(
        self,
        agent: str,
        used: dict[str, dict[str, int]],
        entry: AgentEntry | None,
        timed_out: int,
        capability_evidence: dict[str, Any],
    ) -> tuple[int, dict[str, Any]]:
        gaps: dict[str, int] = {}
        detail: dict[str, Any] = {}
        if entry is None:
            gaps["not_declared"] = 40
        else:
            if not entry.owner:
                gaps["no_owner"] = 25
            drift = sorted(t for t in used if not any(glob_match(g, t) for g in entry.tools))
            if drift:
                gaps["used_not_declared"] = min(20, 5 * len(drift))
                detail["used_not_declared"] = drift
            unused = sorted(g for g in entry.tools if is_exact(g) and g not in used)
            if unused:
                gaps["declared_not_used"] = min(10, 2 * len(unused))
                detail["declared_not_used"] = unused
        # tools it uses from MCP upstreams that are not pinned (pin_tools off, or new / changed)
        unpinned = []
        pins = self.mesh.pins
        for tool in self.mesh.registry.tools():
            if tool.name in used and tool.source == "mcp":
                status = pins.status_of(tool) if pins.enabled else "off"
                if status != "pinned":
                    unpinned.append(f"{tool.name} ({status})")
        if unpinned:
            gaps["unpinned_tools"] = min(20, 5 * len(unpinned))
            detail["unpinned_tools"] = unpinned
        wild = [r for r in self._agent_rules(agent) if r["wildcards"]]
        if wild:
            gaps["wildcard_rules"] = min(20, 5 * len(wild))
            detail["wildcard_rules"] = [f"{r['policy']}[{r['index']}] {','.join(r['wildcards'])}" for r in wild]
        now = time.time()
        long = [g.id for g in self.mesh.grants.active_for_agent(agent) if now - g.created_ts > LONG_GRANT_SECONDS]
        if long:
            gaps["long_open_grants"] = min(20, 10 * len(long))
            detail["long_open_grants"] = long
        if timed_out:
            gaps["approvals_timed_out"] = min(20, 5 * timed_out)
            detail["approvals_timed_out"] = timed_out
        return max(0, 100 - sum(gaps.values())), {"gaps": gaps, **detail}
