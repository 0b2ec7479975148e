"""The governance engine's one entry point for the HTTP edge and the CLI: evaluation (scores, findings,
verdicts, kept over time), the graph and impact, the diff engine, drafts and policy replay."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from flux7.shared.errors import BadRequest, ConfigError, NotFound
from flux7.shared.gate.audit import rfc3339
from flux7.shared.gate.pins import observe_tool
from flux7.shared.gate.policy import PolicySet
from flux7.shared.globs import is_exact
from flux7.shared.governance.activity import EVENTS, Activity
from flux7.shared.governance.diff import (
    catalog_changes,
    ordered,
    policy_changes,
    policy_set_of,
    text_diff,
    tool_changes,
)
from flux7.shared.governance.graph import Graph
from flux7.shared.governance.replay import replay
from flux7.shared.governance.rules import Finding, Rules, load_rules, verdict_of
from flux7.shared.governance.scores import Axes
from flux7.shared.governance.versions import KINDS

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["Governance"]

log = logging.getLogger("flux7.governance")

IMPACT_DAYS = 30
SCORE_ROW_EVERY = 3600.0  # an unchanged score is still written this often, so the trend has points
MAX_REPLAY_DAYS = 365


def _finding_view(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(f)
    out["first_seen"] = rfc3339(f.first_seen)
    out["last_seen"] = rfc3339(f.last_seen)
    return out


class Governance:
    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.settings = mesh.settings.governance
        rules_file = self.settings.rules_file
        path = mesh.settings.resolve_path(rules_file) if rules_file else None
        self.rules = Rules(mesh.db, load_rules(path), self.settings)
        self.activity = Activity(mesh.db)
        self.axes = Axes(mesh)
        self._lock = threading.Lock()

    def catalog(self) -> dict[str, Any]:
        """The catalog listing, with the agents seen in the folded activity (the last 30 days) that no entry
        declares, and those a glob entry describes (`covered`, each naming its entry; the glob entry lists them
        in `covers`): folding reads only the trace lines written since the last fold."""
        self.activity.fold()
        seen = self.activity.agents()
        catalog = self.mesh.catalog
        listing = catalog.listing(seen)
        latest = {s["agent"]: s for s in self.scores()}  # verdict badges: the latest evaluation's, if any
        covered: list[dict[str, Any]] = []
        covers: dict[str, list[str]] = {}
        for agent in sorted(set(seen) | set(latest)):
            entry = catalog.match(agent)
            if entry is None or entry.id == agent:
                continue
            covers.setdefault(entry.id, []).append(agent)
            row = {k: getattr(entry, k) for k in ("name", "owner", "team")}
            covered.append({"id": agent, "entry": entry.id, "state": catalog.state_of(entry), **row})
        listing["covered"] = covered
        for item in listing["agents"]:
            if item["id"] in covers:
                item["covers"] = covers[item["id"]]
        for item in (*listing["agents"], *listing["discovered"], *covered):
            scored = latest.get(item["id"])
            item["verdict"] = scored["verdict"] if scored else ""
            item["scores"] = {k: scored[k] for k in ("capability", "behaviour", "hygiene")} if scored else None
        return listing

    def roster(self) -> list[dict[str, Any]]:
        """GET /governance/agents: one row per agent id - declared by an exact entry, covered by a glob entry, or
        discovered - each with the entry that describes it, its lifecycle state, and the latest verdict and
        scores; glob entries themselves are catalog entries, not agents (GET /governance/catalog lists them)."""
        listing = self.catalog()
        keys = ("name", "owner", "team", "state", "verdict", "scores")
        rows = [
            {"id": a["id"], "origin": "declared", "entry": a["id"], **{k: a[k] for k in keys}}
            for a in listing["agents"]
            if is_exact(a["id"])
        ]
        rows += [
            {"id": c["id"], "origin": "covered", **{k: c[k] for k in ("entry", *keys)}} for c in listing["covered"]
        ]
        blank = {"entry": "", "name": "", "owner": "", "team": "", "state": "discovered"}
        rows += [
            {"id": d["id"], "origin": "discovered", **blank, "verdict": d["verdict"], "scores": d["scores"]}
            for d in listing["discovered"]
        ]
        return sorted(rows, key=lambda r: r["id"])

    # -- evaluation ----------------------------------------------------------------------------------------

    def _evaluated_at(self) -> float:
        row = self.mesh.db.query_one("SELECT evaluated_at FROM governance_cursor WHERE id = 1")
        return float(row[0]) if row is not None else 0.0

    def refresh(self) -> None:
        """Evaluate when the last evaluation is older than governance.refresh_seconds."""
        if time.time() - self._evaluated_at() >= self.settings.refresh_seconds:
            self.evaluate()

    def agents(self, window: dict[str, Any]) -> list[str]:
        declared = {e.id for e in self.mesh.catalog.entries if "*" not in e.id and "?" not in e.id and "[" not in e.id}
        return sorted(declared | set(window))

    def evaluate(self, now: float | None = None) -> list[dict[str, Any]]:
        """Fold in the traces written since the last time, then score, judge and record every agent."""
        with self._lock:
            now = time.time() if now is None else now
            self.activity.fold()
            for tool in self.mesh.registry.tools():
                observe_tool(self.mesh.versions, tool)
            days = self.settings.window_days
            window = self.activity.window(days, now)
            since_ns = int((now - days * 86400) * 1e9)
            out = [self._evaluate_agent(agent, window.get(agent, {}), since_ns, now) for agent in self.agents(window)]
            self.activity.prune(max(days, IMPACT_DAYS) + 1, now)
            self.mesh.db.execute("UPDATE governance_cursor SET evaluated_at = ? WHERE id = 1", (now,))
            return out

    def _latest_calls(self, agent: str, tools: list[str] | None = None, limit: int = 5) -> list[str]:
        if tools is not None and not tools:
            return []
        where, params = "agent_id = ?", [agent]
        if tools:
            where += f" AND tool IN ({','.join('?' for _ in tools)})"
            params += tools
        rows = self.mesh.db.query(
            f"SELECT trace_id FROM traces WHERE {where} ORDER BY id DESC LIMIT ?", (*params, limit)
        )
        return [str(r[0]) for r in rows]

    def _evaluate_agent(self, agent: str, used: dict[str, dict[str, int]], since_ns: int, now: float) -> dict[str, Any]:
        catalog = self.mesh.catalog
        entry = catalog.match(agent)
        capability, cap_ev = self.axes.capability(agent)

        def evidence_of(kind: str) -> list[str]:
            return self.activity.evidence(agent, kind, since_ns)

        behaviour, beh_ev = self.axes.behaviour(agent, used, entry, evidence_of)
        timed_out = sum(c.get("approvals_timed_out", 0) for c in used.values())
        hygiene, hyg_ev = self.axes.hygiene(agent, used, entry, timed_out, cap_ev)
        counts = {**beh_ev["counts"], "approvals_timed_out": timed_out, "calls": beh_ev["calls"]}
        facts = {
            "declared": int(entry is not None),
            "has_owner": int(bool(entry is not None and entry.owner)),
            "state": catalog.state_of(entry) if entry is not None else "discovered",
            "undeclared_tools": len(beh_ev["undeclared_tools"]),
            "destructive_allowed": cap_ev["destructive_allowed"],
            "wildcard_allow_rules": len(cap_ev["wildcard_allow_rules"]),
            "open_grants": len(cap_ev["open_grants"]),
        }
        scores = {"capability": capability, "behaviour": behaviour, "hygiene": hygiene}
        behaviour_ids = sorted({t for ids in beh_ev["traces"].values() for t in ids})
        evidence_ids: dict[str, list[str]] = {
            **{kind: evidence_of(kind) for kind in EVENTS},
            "capability": [],
            "behaviour": behaviour_ids,
            "hygiene": evidence_of("approvals_timed_out"),
            "calls": self._latest_calls(agent),
            "drift": self._latest_calls(agent, beh_ev["undeclared_tools"]),
        }
        findings = self.rules.apply(agent, {"scores": scores, "facts": facts, "counts": counts}, evidence_ids, now)
        verdict = verdict_of(findings)
        evidence = {"capability": cap_ev, "behaviour": beh_ev, "hygiene": hyg_ev}
        self._keep_score(agent, now, scores, verdict, evidence)
        return {
            "agent": agent,
            "declared": entry is not None,
            "entry": entry.id if entry is not None else "",
            "state": facts["state"],
            "scores": scores,
            "verdict": verdict,
            "findings": [_finding_view(f) for f in findings],
            "evidence": evidence,
        }

    def _keep_score(self, agent: str, now: float, scores: dict[str, int], verdict: str, evidence: Any) -> None:
        last = self.mesh.db.query_one(
            "SELECT at, capability, behaviour, hygiene, verdict FROM governance_scores WHERE agent_id = ? "
            "ORDER BY id DESC LIMIT 1",
            (agent,),
        )
        same = last is not None and (
            int(last["capability"]),
            int(last["behaviour"]),
            int(last["hygiene"]),
            str(last["verdict"]),
        ) == (scores["capability"], scores["behaviour"], scores["hygiene"], verdict)
        if last is not None and same and now - float(last["at"]) < SCORE_ROW_EVERY:
            return
        self.mesh.db.execute(
            "INSERT INTO governance_scores (agent_id, at, capability, behaviour, hygiene, verdict, evidence) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (agent, now, scores["capability"], scores["behaviour"], scores["hygiene"], verdict, json.dumps(evidence)),
        )

    # -- reads ---------------------------------------------------------------------------------------------

    def scores(self) -> list[dict[str, Any]]:
        """The latest scores and verdict of every agent (declared and discovered)."""
        rows = self.mesh.db.query(
            "SELECT s.* FROM governance_scores s JOIN (SELECT agent_id, max(id) AS id FROM governance_scores "
            "GROUP BY agent_id) m ON m.id = s.id ORDER BY s.agent_id"
        )
        catalog = self.mesh.catalog
        out = []
        for r in rows:
            entry = catalog.match(str(r["agent_id"]))
            out.append(
                {
                    "agent": r["agent_id"],
                    "declared": entry is not None,
                    "state": catalog.state_of(entry) if entry is not None else "discovered",
                    "capability": int(r["capability"]),
                    "behaviour": int(r["behaviour"]),
                    "hygiene": int(r["hygiene"]),
                    "verdict": r["verdict"],
                    "at": rfc3339(float(r["at"])),
                }
            )
        return out

    def agent(self, agent: str, history: int = 100) -> dict[str, Any]:
        rows = self.mesh.db.query(
            "SELECT * FROM governance_scores WHERE agent_id = ? ORDER BY id DESC LIMIT ?", (agent, history)
        )
        entry = self.mesh.catalog.match(agent)
        if not rows and entry is None:
            raise NotFound(f"agent {agent!r} is neither declared nor scored")
        findings = self.rules.current(agent)
        latest = rows[0] if rows else None
        out: dict[str, Any] = {
            "agent": agent,
            "declared": entry is not None,
            "entry": entry.view() if entry is not None else None,
            "state": self.mesh.catalog.state_of(entry) if entry is not None else "discovered",
            "lifecycle": self.mesh.catalog.history(entry.id) if entry is not None else [],
            "verdict": verdict_of(findings) if latest is not None else "",
            "findings": sorted(
                (_finding_view(f) for f in findings),
                key=lambda f: (-["info", "low", "medium", "high", "critical"].index(f["severity"]), f["rule"]),
            ),
            "scores": None,
            "evidence": None,
            "history": [
                {
                    "at": rfc3339(float(r["at"])),
                    "capability": int(r["capability"]),
                    "behaviour": int(r["behaviour"]),
                    "hygiene": int(r["hygiene"]),
                    "verdict": r["verdict"],
                }
                for r in reversed(rows)
            ],
        }
        if latest is not None:
            out["scores"] = {k: int(latest[k]) for k in ("capability", "behaviour", "hygiene")}
            out["evidence"] = json.loads(latest["evidence"])
        return out

    def findings(self, severity: str = "") -> list[dict[str, Any]]:
        rows = self.mesh.db.query(
            "SELECT agent_id, rule_id FROM governance_findings WHERE resolved_at IS NULL ORDER BY agent_id, rule_id"
        )
        out = []
        for agent in sorted({str(r[0]) for r in rows}):
            for f in self.rules.current(agent):
                if not severity or f.severity == severity:
                    out.append({"agent": agent, **_finding_view(f)})
        return out

    def verdicts(self) -> list[dict[str, Any]]:
        return [{"agent": s["agent"], "verdict": s["verdict"], "state": s["state"]} for s in self.scores()]

    # -- graph and impact ----------------------------------------------------------------------------------

    def graph(self, days: int = IMPACT_DAYS) -> Graph:
        self.activity.fold()
        return Graph(self.mesh, self.activity.window(days))

    def impact(self, kind: str, name: str, days: int = IMPACT_DAYS) -> dict[str, Any]:
        if not 1 <= days <= MAX_REPLAY_DAYS:
            raise BadRequest(f"days is between 1 and {MAX_REPLAY_DAYS}")
        return self.graph(days).impact(kind, name, days, time.time_ns())

    # -- diff ----------------------------------------------------------------------------------------------

    def diff(self, kind: str, name: str, old: int | None = None, new: int | None = None) -> dict[str, Any]:
        """Changes between two versions (default: the newest and the one before it), classified."""
        if kind not in KINDS:
            raise BadRequest(f"kind must be one of {', '.join(KINDS)}")
        versions = self.mesh.versions
        history = versions.history(kind, name)
        if not history:
            raise NotFound(f"no versions of {kind} {name!r}")
        newest = history[-1]["version"]
        new = newest if new is None else new
        old = (new - 1) if old is None else old
        after = versions.get(kind, name, new)
        if after is None:
            raise NotFound(f"{kind} {name!r} has no version {new}")
        before = versions.get(kind, name, old) if old >= 1 else None
        if old >= 1 and before is None:
            raise NotFound(f"{kind} {name!r} has no version {old}")
        return self._diff(kind, name, before["content"] if before else "", after["content"], old, new)

    def _diff(self, kind: str, name: str, old_text: str, new_text: str, old: int, new: int) -> dict[str, Any]:
        graph = self.graph(IMPACT_DAYS)
        try:
            if kind == "tool":
                changes = tool_changes(name, old_text, new_text, graph.users_of(name))
            elif kind == "catalog":
                changes = catalog_changes(name, old_text, new_text, graph.used)
            else:
                changes = self._policy_diff({name: old_text}, {name: new_text}, graph)
        except ConfigError as e:
            raise BadRequest(f"a version does not parse: {e}") from None
        return {
            "kind": kind,
            "name": name,
            "from": old,
            "to": new,
            "changes": ordered(changes),
            "summary": {c: sum(1 for x in changes if x["class"] == c) for c in ("breaking", "expanding", "neutral")},
            "text_diff": text_diff(old_text, new_text, name),
        }

    def _policy_texts(self) -> dict[str, str]:
        directory = self.mesh.policies.policy_dir
        if directory is None or not directory.is_dir():
            return {}
        return {p.name: p.read_bytes().decode("utf-8", errors="replace") for p in sorted(directory.glob("*.yaml"))}

    def _policy_set(self, overlay: dict[str, str | None]) -> PolicySet:
        """The policy set in force with `overlay` applied (file name -> new text, None removes the file)."""
        directory = self.mesh.policies.policy_dir or Path.cwd()
        texts: dict[str, str] = self._policy_texts()
        for fname, text in overlay.items():
            fname = fname if fname.endswith(".yaml") else f"{fname}.yaml"
            if Path(fname).name != fname or fname.startswith("."):
                raise BadRequest(f"invalid policy file name {fname!r}")
            if text is None:
                texts.pop(fname, None)
            else:
                texts[fname] = text
        base = [p for p in self.mesh.policies.current.policies if not p.source_file or self._inline(p.source_file)]
        try:
            return policy_set_of(texts, base, directory)
        except ConfigError as e:
            raise BadRequest(f"{e.key}: {e.fault}" if e.key else str(e), extra={"key": e.key}) from None

    def _inline(self, source: str) -> bool:
        """A policy written in the config file itself (not a policy_dir file)."""
        directory = self.mesh.policies.policy_dir
        return directory is None or Path(source).parent != directory

    def _policy_diff(self, old: dict[str, str], new: dict[str, str], graph: Graph) -> list[dict[str, Any]]:
        before = self._policy_set({k: v or None for k, v in old.items()})
        after = self._policy_set({k: v or None for k, v in new.items()})
        agents = set(graph.window) | {e.id for e in self.mesh.catalog.entries if "*" not in e.id}
        tools = {t.name for t in self.mesh.registry.tools()} | {t for tools in graph.window.values() for t in tools}
        return policy_changes(before, after, agents, tools, graph.used)

    def pin_diff(self, tool_name: str) -> dict[str, Any]:
        """A pinned tool whose definition changed (a rug pull): the exact definition diff, classified."""
        tool = self.mesh.registry.lookup(tool_name)
        if tool is None:
            raise NotFound(f"unknown tool: {tool_name}")
        row = self.mesh.db.query_one(
            "SELECT fingerprint, pinned_at, pinned_by FROM tool_pins WHERE tool = ?", (tool_name,)
        )
        if row is None:
            raise NotFound(f"{tool_name} is not pinned")
        observe_tool(self.mesh.versions, tool)
        current = tool.fingerprint_text()
        kept = self.mesh.db.query_one(
            "SELECT version, content FROM governance_versions WHERE kind = 'tool' AND name = ? AND sha256 = ? "
            "ORDER BY version DESC LIMIT 1",
            (tool_name, str(row["fingerprint"])),
        )
        out: dict[str, Any] = {
            "tool": tool_name,
            "pinned_at": rfc3339(float(row["pinned_at"])),
            "pinned_by": row["pinned_by"],
        }
        if kept is None:
            out.update(
                status="unknown", error="the pinned definition was not kept (pinned before versions were recorded)"
            )
            return out
        pinned_text = str(kept["content"])
        if pinned_text == current:
            out.update(status="pinned", changes=[], text_diff="")
            return out
        graph = self.graph(IMPACT_DAYS)
        changes = tool_changes(tool_name, pinned_text, current, graph.users_of(tool_name))
        out.update(
            status="changed",
            pinned_version=int(kept["version"]),
            changes=ordered(changes),
            text_diff=text_diff(_pretty(pinned_text), _pretty(current), tool_name),
        )
        return out

    # -- drafts and replay ---------------------------------------------------------------------------------

    def save_draft(self, name: str, files: dict[str, str | None], by: str) -> dict[str, Any]:
        if not name or len(name) > 128 or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise BadRequest("a draft name is letters, digits, '-', '_' and '.'")
        if not files:
            raise BadRequest("a draft changes at least one policy file")
        proposed = self._policy_set(files)  # refused here when it does not load
        self.mesh.db.execute(
            "INSERT INTO governance_drafts (name, files, created_at, created_by, applied_at) VALUES (?, ?, ?, ?, NULL) "
            "ON CONFLICT (name) DO UPDATE SET files = excluded.files, created_at = excluded.created_at, "
            "created_by = excluded.created_by, applied_at = NULL",
            (name, json.dumps(files), time.time(), by),
        )
        return {"name": name, "files": sorted(files), "policies": len(proposed.policies)}

    def draft(self, name: str) -> dict[str, Any]:
        row = self.mesh.db.query_one("SELECT * FROM governance_drafts WHERE name = ?", (name,))
        if row is None:
            raise NotFound(f"no draft {name!r}")
        return {
            "name": name,
            "files": json.loads(row["files"]),
            "created_at": rfc3339(float(row["created_at"])),
            "created_by": row["created_by"],
            "applied_at": rfc3339(float(row["applied_at"])) if row["applied_at"] else "",
        }

    def drafts(self) -> list[dict[str, Any]]:
        rows = self.mesh.db.query("SELECT name FROM governance_drafts ORDER BY name")
        return [self.draft(str(r[0])) for r in rows]

    def replay(self, *, files: dict[str, str | None] | None = None, draft: str = "", days: float = 7) -> dict[str, Any]:
        if not 0 < days <= MAX_REPLAY_DAYS:
            raise BadRequest(f"days is between 0 and {MAX_REPLAY_DAYS}")
        if bool(files) == bool(draft):
            raise BadRequest("give exactly one of `files` (a proposed policy set) and `draft`")
        overlay = self.draft(draft)["files"] if draft else dict(files or {})
        result = replay(self.mesh, self._policy_set(overlay), days)  # against the set in force
        result["draft"] = draft
        result["files"] = sorted(overlay)
        return result

    def apply_draft(self, name: str, by: str) -> dict[str, Any]:
        """Write the draft's files through the policy editor (validated, `.bak` kept, reloaded)."""
        from flux7.shared.gate.policy_edit import PolicyFiles

        files = self.draft(name)["files"]
        editor = PolicyFiles(self.mesh.policies)
        written = []
        for fname, text in sorted(files.items()):
            if text is None:
                path = editor.directory / (fname if fname.endswith(".yaml") else f"{fname}.yaml")
                if path.is_file():
                    path.rename(path.with_name(path.name + ".bak"))
                    self.mesh.policies.reload_if_changed(force=True)
                written.append({"name": fname, "removed": True})
            else:
                written.append(editor.write(fname.removesuffix(".yaml"), text))
        self.mesh.db.execute("UPDATE governance_drafts SET applied_at = ? WHERE name = ?", (time.time(), name))
        return {"name": name, "applied": written, "by": by, "policy_version": self.mesh.policies.current.version}


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    except ValueError:
        return text
