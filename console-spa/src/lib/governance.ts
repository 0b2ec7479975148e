// Pure helpers of the governance pages: catalog rows and their filters, severity order, transition order,
// the lifecycle moves the server accepts, and the unified diff split into two columns.
import type { CatalogListing, Change, ChangeClass, Finding, Lifecycle, ReplayGroup, Scores, Verdict } from "../api/governance";

export interface CatalogRow {
  id: string;
  name: string;
  owner: string;
  team: string;
  state: string; // a lifecycle state, or "discovered"
  /** declared by its own entry, described by a glob entry, or seen in the trace only */
  origin: "declared" | "covered" | "discovered";
  declared: boolean;
  /** the glob entry that describes a covered agent */
  entry: string;
  /** a glob entry's agents (each its own row) */
  covers: string[] | null;
  verdict: Verdict;
  scores: Scores | null;
  tools: string[];
  flag: string;
}

const isGlob = (id: string) => /[*?[\\]/.test(id);

/** One row per entry and per agent: a glob entry's agents follow it, each with its own verdict. */
export function catalogRows(l: CatalogListing): CatalogRow[] {
  const covered = l.covered ?? [];
  const declared = (l.agents ?? []).flatMap((a): CatalogRow[] => {
    const row: CatalogRow = {
      id: a.id,
      name: a.name,
      owner: a.owner,
      team: a.team,
      state: a.state,
      origin: "declared",
      declared: true,
      entry: a.id,
      covers: isGlob(a.id) ? (a.covers ?? covered.filter((c) => c.entry === a.id).map((c) => c.id)) : null,
      verdict: a.verdict,
      scores: a.scores,
      tools: a.tools ?? [],
      flag: "",
    };
    const under = covered
      .filter((c) => c.entry === a.id)
      .map((c): CatalogRow => ({ ...c, origin: "covered", declared: true, covers: null, tools: a.tools ?? [], flag: "" }));
    return [row, ...under];
  });
  const found = (l.discovered ?? []).map((d): CatalogRow => ({
    id: d.id,
    name: "",
    owner: "",
    team: "",
    state: "discovered",
    origin: "discovered",
    declared: false,
    entry: "",
    covers: null,
    verdict: d.verdict,
    scores: d.scores,
    tools: [],
    flag: d.flag,
  }));
  return [...declared, ...found];
}

export interface CatalogFilter {
  verdict?: string;
  state?: string;
  who?: string; // matches owner or team, case-insensitively
  origin?: string; // "declared" (entries and the agents they cover) | "covered" | "discovered"
}

export function filterRows(rows: CatalogRow[], f: CatalogFilter): CatalogRow[] {
  const who = (f.who ?? "").trim().toLowerCase();
  return rows.filter(
    (r) =>
      // a glob entry has no verdict of its own (its agents have theirs): it is never "not scored"
      (!f.verdict || (f.verdict === "none" ? !r.verdict && !r.covers : r.verdict === f.verdict)) &&
      (!f.state || r.state === f.state) &&
      (!f.origin || (f.origin === "covered" ? r.origin === "covered" : (f.origin === "declared") === r.declared)) &&
      (!who || r.owner.toLowerCase().includes(who) || r.team.toLowerCase().includes(who)),
  );
}

export const SEVERITIES = ["critical", "high", "medium", "low", "info"] as const;

export const severityRank = (s: string) => {
  const i = (SEVERITIES as readonly string[]).indexOf(s);
  return i < 0 ? SEVERITIES.length : i;
};

export const bySeverity = (fs: Finding[]) => [...fs].sort((a, b) => severityRank(a.severity) - severityRank(b.severity) || a.rule.localeCompare(b.rule));

export const severityTone = (s: string) => (s === "critical" || s === "high" ? "bad" : s === "medium" || s === "low" ? "warn" : "muted");

export const verdictTone = (v: string) => (v === "pass" ? "ok" : v === "warn" ? "warn" : v === "fail" ? "bad" : "muted");

/** The moves shared/governance/catalog.py accepts: proposed → active → suspended → active …, anything → retired. */
export function nextStates(state: string): Lifecycle[] {
  switch (state) {
    case "proposed":
      return ["active", "retired"];
    case "active":
      return ["suspended", "retired"];
    case "suspended":
      return ["active", "retired"];
    default:
      return [];
  }
}

const CLASS_ORDER: Record<ChangeClass, number> = { breaking: 0, expanding: 1, neutral: 2 };

/** Breaking first, then expanding (a security review item), then neutral; the server's order within a class. */
export const orderChanges = (cs: Change[]) =>
  cs.map((c, i) => [c, i] as const).sort((a, b) => (CLASS_ORDER[a[0].class] ?? 3) - (CLASS_ORDER[b[0].class] ?? 3) || a[1] - b[1]).map(([c]) => c);

const PERMISSIVE: Record<string, number> = { allow: 0, human_approval: 1, deny: 2 };

/** A change that takes a permission away (allow → approval → deny) narrows; the rest widen. */
export const narrows = (from: string, to: string) => (PERMISSIVE[to] ?? 2) > (PERMISSIVE[from] ?? 2);

export interface AgentGroups {
  agent: string;
  count: number;
  groups: ReplayGroup[];
}

/** Replay groups by agent (most changed calls first), narrowing changes first within an agent. */
export function groupByAgent(groups: ReplayGroup[]): AgentGroups[] {
  const byAgent = new Map<string, ReplayGroup[]>();
  for (const g of groups) byAgent.set(g.agent, [...(byAgent.get(g.agent) ?? []), g]);
  return [...byAgent.entries()]
    .map(([agent, gs]) => ({
      agent,
      count: gs.reduce((n, g) => n + g.count, 0),
      groups: [...gs].sort((a, b) => Number(narrows(b.from, b.to)) - Number(narrows(a.from, a.to)) || a.tool.localeCompare(b.tool)),
    }))
    .sort((a, b) => b.count - a.count || a.agent.localeCompare(b.agent));
}

export interface SideRow {
  left: string | null;
  right: string | null;
  kind: "same" | "del" | "add" | "change" | "hunk";
  leftNo?: number;
  rightNo?: number;
}

/** A unified diff as two columns: removed lines on the left beside the added lines that replace them. */
export function sideBySide(unified: string): SideRow[] {
  const rows: SideRow[] = [];
  let l = 0;
  let r = 0;
  let dels: string[] = [];
  let adds: string[] = [];
  const flush = () => {
    const n = Math.max(dels.length, adds.length);
    for (let i = 0; i < n; i++) {
      const a = dels[i] ?? null;
      const b = adds[i] ?? null;
      rows.push({
        left: a,
        right: b,
        kind: a !== null && b !== null ? "change" : a !== null ? "del" : "add",
        leftNo: a !== null ? ++l : undefined,
        rightNo: b !== null ? ++r : undefined,
      });
    }
    dels = [];
    adds = [];
  };
  for (const line of unified.split("\n")) {
    if (line.startsWith("---") || line.startsWith("+++")) continue;
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (hunk) {
      flush();
      l = Number(hunk[1]) - 1;
      r = Number(hunk[2]) - 1;
      rows.push({ left: line, right: line, kind: "hunk" });
    } else if (line.startsWith("-")) dels.push(line.slice(1));
    else if (line.startsWith("+")) adds.push(line.slice(1));
    else if (line.startsWith(" ") || (line === "" && rows.length)) {
      flush();
      if (line === "") continue;
      rows.push({ left: line.slice(1), right: line.slice(1), kind: "same", leftNo: ++l, rightNo: ++r });
    }
  }
  flush();
  return rows;
}
