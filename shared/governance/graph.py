"""The dependency graph: agents, tools, upstreams and sub-agents; edges declared in the catalog and inferred
from the trace (calls, last seen, error rate over the window), and impact analysis over the last 30 days."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flux7.shared.errors import BadRequest, NotFound
from flux7.shared.globs import glob_match, is_exact
from flux7.shared.tracing.entry import format_timestamp

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["IMPACT_KINDS", "Graph"]

IMPACT_KINDS = ("upstream", "tool", "agent")
_NS = 1_000_000_000


class Graph:
    def __init__(self, mesh: Mesh, window: dict[str, dict[str, dict[str, int]]]) -> None:
        self.mesh = mesh
        self.window = window  # agent -> tool -> counts, over the graph's days
        self.tool_upstream: dict[str, str] = {}
        for tool in mesh.registry.tools():
            name, _ = mesh.registry.upstream_of(tool)
            self.tool_upstream[tool.name] = name or tool.mcp_server
        self.upstreams = {u[0] for u in mesh.registry.upstream_states()} | {u for u in self.tool_upstream.values() if u}

    def upstream_of(self, tool: str) -> str:
        if tool in self.tool_upstream:
            return self.tool_upstream[tool]
        prefix = tool.split(".", 1)[0]  # a tool no longer served: its namespace names its upstream
        return prefix if prefix in self.upstreams and "." in tool else ""

    def used(self, agent: str, tool: str) -> bool:
        return self.window.get(agent, {}).get(tool, {}).get("calls", 0) > 0

    def users_of(self, tool: str) -> list[str]:
        return sorted(a for a, tools in self.window.items() if tools.get(tool, {}).get("calls", 0) > 0)

    def build(self) -> dict[str, Any]:
        nodes: dict[str, dict[str, Any]] = {}
        edges: list[dict[str, Any]] = []
        catalog = self.mesh.catalog

        def node(kind: str, name: str, **extra: Any) -> str:
            nid = f"{kind}:{name}"
            if nid not in nodes:
                nodes[nid] = {"id": nid, "type": kind, "label": name, **extra}
            else:
                nodes[nid].update(extra)
            return nid

        for tool, upstream in sorted(self.tool_upstream.items()):
            t = node("tool", tool)
            if upstream:
                edges.append({"source": t, "target": node("upstream", upstream), "kind": "served_by"})
        for u in sorted(self.upstreams):
            node("upstream", u)
        for entry in catalog.entries:
            a = node("agent", entry.id, declared=True, state=catalog.state_of(entry), glob=not is_exact(entry.id))
            for pattern in entry.tools:
                for tool in sorted(self.tool_upstream) or ([pattern] if is_exact(pattern) else []):
                    if glob_match(pattern, tool):
                        edges.append({"source": a, "target": node("tool", tool), "kind": "declared"})
                if is_exact(pattern) and pattern not in self.tool_upstream:
                    edges.append({"source": a, "target": node("tool", pattern), "kind": "declared"})
            for upstream in entry.upstreams:
                edges.append({"source": a, "target": node("upstream", upstream), "kind": "declared"})
            for sub in entry.sub_agents:
                edges.append({"source": a, "target": node("agent", sub), "kind": "declared", "relation": "sub_agent"})
        for agent, tools in sorted(self.window.items()):
            matched = catalog.match(agent)
            a = node("agent", agent, declared=matched is not None, discovered=matched is None)
            if matched is not None and matched.id != agent:
                edges.append(
                    {"source": a, "target": node("agent", entry.id), "kind": "declared", "relation": "matches"}
                )
            for tool, c in sorted(tools.items()):
                t = node("tool", tool)
                upstream = self.upstream_of(tool)
                if upstream and tool not in self.tool_upstream:
                    edges.append({"source": t, "target": node("upstream", upstream), "kind": "served_by"})
                calls = c["calls"]
                edges.append(
                    {
                        "source": a,
                        "target": t,
                        "kind": "inferred",
                        "calls": calls,
                        "errors": c["upstream_errors"],
                        "error_rate": round(c["upstream_errors"] / calls, 4) if calls else 0.0,
                        "last_seen": format_timestamp(c["last_ns"]) if c["last_ns"] else "",
                    }
                )
        return {"nodes": sorted(nodes.values(), key=lambda n: n["id"]), "edges": edges}

    def impact(self, kind: str, name: str, days: int = 30, now_ns: int = 0) -> dict[str, Any]:
        """What breaks if upstream X is removed, tool Y changes or agent Z is suspended: the agents, tools and
        sessions of the last `days` that would be affected, with counts."""
        if kind not in IMPACT_KINDS:
            raise BadRequest(f"impact kind must be one of {', '.join(IMPACT_KINDS)}")
        since = now_ns - days * 86400 * _NS
        db = self.mesh.db
        dependants: list[str] = []
        if kind == "agent":
            dependants = sorted(e.id for e in self.mesh.catalog.entries if name in e.sub_agents)
            rows = db.query(
                "SELECT tool, count(*) AS calls, count(DISTINCT NULLIF(session_id, '')) AS sessions FROM traces "
                "WHERE agent_id = ? AND ts_ns >= ? AND tool NOT LIKE 'mesh.%' GROUP BY tool ORDER BY tool",
                (name, since),
            )
            total = db.query(
                "SELECT count(*), count(DISTINCT NULLIF(session_id, '')) FROM traces WHERE agent_id = ? "
                "AND ts_ns >= ? AND tool NOT LIKE 'mesh.%'",
                (name, since),
            )[0]  # an aggregate: one row
            if not rows and self.mesh.catalog.match(name) is None and not dependants:
                raise NotFound(f"agent {name!r} is neither declared nor seen in the last {days} days")
            return {
                "kind": kind,
                "name": name,
                "days": days,
                "calls": int(total[0]),
                "sessions": int(total[1]),
                "tools": [{"tool": r["tool"], "calls": int(r["calls"]), "sessions": int(r["sessions"])} for r in rows],
                "agents": [{"agent": name, "calls": int(total[0]), "sessions": int(total[1])}],
                "dependants": dependants,
            }
        if kind == "upstream":
            known = {t for t, u in self.tool_upstream.items() if u == name}
            seen = {
                str(r[0])
                for r in db.query(
                    "SELECT DISTINCT tool FROM traces WHERE tool LIKE ? ESCAPE '\\' AND ts_ns >= ?",
                    (name.replace("%", "\\%").replace("_", "\\_") + ".%", since),
                )
            }
            tools = sorted(known | {t for t in seen if self.upstream_of(t) == name})
            if not tools and name not in self.upstreams:
                raise NotFound(f"upstream {name!r} is neither configured nor seen in the last {days} days")
        else:
            tools = [name]
        marks = ",".join("?" for _ in tools) or "''"
        rows = db.query(
            f"SELECT agent_id, tool, count(*) AS calls FROM traces WHERE tool IN ({marks}) AND ts_ns >= ? "
            "AND agent_id != '' GROUP BY agent_id, tool",
            (*tools, since),
        )
        total = db.query(
            f"SELECT count(*), count(DISTINCT NULLIF(session_id, '')) FROM traces WHERE tool IN ({marks}) "
            f"AND ts_ns >= ? AND agent_id != ''",
            (*tools, since),
        )[0]  # an aggregate: one row
        if kind == "tool" and not rows and name not in self.tool_upstream:
            raise NotFound(f"tool {name!r} is neither registered nor seen in the last {days} days")
        sessions = {
            str(r[0]): int(r[1])
            for r in db.query(
                f"SELECT agent_id, count(DISTINCT NULLIF(session_id, '')) FROM traces WHERE tool IN ({marks}) "
                f"AND ts_ns >= ? AND agent_id != '' GROUP BY agent_id",
                (*tools, since),
            )
        }
        agents: dict[str, dict[str, Any]] = {}
        per_tool: dict[str, int] = dict.fromkeys(tools, 0)
        for r in rows:
            agent = str(r["agent_id"])
            a = agents.setdefault(agent, {"agent": agent, "calls": 0, "sessions": sessions.get(agent, 0), "tools": []})
            a["calls"] += int(r["calls"])
            a["tools"].append(r["tool"])
            per_tool[r["tool"]] = per_tool.get(r["tool"], 0) + int(r["calls"])
        declared = sorted(
            e.id
            for e in self.mesh.catalog.entries
            if any(glob_match(p, t) for p in e.tools for t in tools) or (kind == "upstream" and name in e.upstreams)
        )
        return {
            "kind": kind,
            "name": name,
            "days": days,
            "calls": int(total[0]),
            "sessions": int(total[1]),
            "tools": [{"tool": t, "calls": n} for t, n in sorted(per_tool.items())],
            "agents": sorted(agents.values(), key=lambda a: (-a["calls"], a["agent"])),
            "declared_by": declared,
        }
