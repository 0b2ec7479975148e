// Effective rights: what the policy says (GET /tools/decisions?agent=) beside what actually happened (traces).
import type { ToolDecision, TraceEntry } from "../api/types";
import { isAgentCall } from "./people";

export interface Observed {
  total: number;
  allowed: number;
  denied: number;
  approval: number;
  other: number;
  /** The newest trace's policy outcome. */
  last: string;
  lastAt: string;
}

export interface AgentSummary extends Observed {
  agent: string;
  tools: string[];
}

function empty(): Observed {
  return { total: 0, allowed: 0, denied: 0, approval: 0, other: 0, last: "", lastAt: "" };
}

function add(o: Observed, t: TraceEntry): void {
  o.total++;
  if (t.policy === "allow") o.allowed++;
  else if (t.policy === "deny" || t.policy === "halted" || t.policy === "rate_limited") o.denied++;
  else if (t.policy === "human_approval") o.approval++;
  else o.other++;
  if (!o.lastAt || t.timestamp > o.lastAt) {
    o.lastAt = t.timestamp;
    o.last = t.policy === "human_approval" && t.approval_status ? `human_approval:${t.approval_status}` : t.policy;
  }
}

export function summarizeAgents(traces: TraceEntry[]): AgentSummary[] {
  const by = new Map<string, { o: Observed; tools: Set<string> }>();
  for (const t of traces) {
    if (!isAgentCall(t)) continue; // operators act on the control plane: never agents
    const agent = t.agent_id;
    let e = by.get(agent);
    if (!e) by.set(agent, (e = { o: empty(), tools: new Set() }));
    add(e.o, t);
    e.tools.add(t.tool);
  }
  return [...by.entries()]
    .map(([agent, e]) => ({ agent, ...e.o, tools: [...e.tools].sort() }))
    .sort((a, b) => (a.lastAt < b.lastAt ? 1 : a.lastAt > b.lastAt ? -1 : 0));
}

export interface Matrix {
  agents: string[];
  tools: string[];
  cells: Map<string, Observed>;
}

export const cellKey = (agent: string, tool: string) => `${agent}\u0000${tool}`;

/** agents × tools, each cell what the traces show for that pair. */
export function observedMatrix(traces: TraceEntry[]): Matrix {
  const cells = new Map<string, Observed>();
  const agents = new Set<string>();
  const tools = new Set<string>();
  for (const t of traces) {
    if (!isAgentCall(t)) continue;
    const agent = t.agent_id;
    agents.add(agent);
    tools.add(t.tool);
    const k = cellKey(agent, t.tool);
    let o = cells.get(k);
    if (!o) cells.set(k, (o = empty()));
    add(o, t);
  }
  return { agents: [...agents].sort(), tools: [...tools].sort(), cells };
}

export interface RightsRow {
  tool: string;
  decision: ToolDecision | null;
  observed: Observed;
}

/** One row per tool: every catalog tool from the decisions, plus tools only seen in the traces. */
export function agentRights(agent: string, decisions: ToolDecision[], traces: TraceEntry[]): RightsRow[] {
  const rows = new Map<string, RightsRow>();
  for (const d of decisions) rows.set(d.name, { tool: d.name, decision: d, observed: empty() });
  for (const t of traces) {
    if (!isAgentCall(t) || t.agent_id !== agent) continue;
    let r = rows.get(t.tool);
    if (!r) rows.set(t.tool, (r = { tool: t.tool, decision: null, observed: empty() }));
    add(r.observed, t);
  }
  return [...rows.values()].sort((a, b) => a.tool.localeCompare(b.tool));
}
