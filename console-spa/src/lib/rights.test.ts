import { describe, expect, it } from "vitest";
import type { ToolDecision, TraceEntry } from "../api/types";
import { agentRights, cellKey, observedMatrix, summarizeAgents } from "./rights";

const t = (agent: string, tool: string, policy: string, ts: string, extra: Partial<TraceEntry> = {}): TraceEntry => ({
  trace_id: `${agent}-${tool}-${ts}`,
  agent_id: agent,
  tool,
  params: null,
  policy,
  timestamp: ts,
  ...extra,
});

const traces = [
  t("a", "fs.read", "allow", "2026-01-01T00:00:03Z"),
  t("a", "fs.read", "deny", "2026-01-01T00:00:01Z"),
  t("a", "fs.write", "human_approval", "2026-01-01T00:00:02Z", { approval_status: "approved" }),
  t("b", "fs.write", "halted", "2026-01-01T00:00:04Z"),
];

describe("effective rights from traces", () => {
  it("summarizes agents newest first with outcome counts", () => {
    const s = summarizeAgents(traces);
    expect(s.map((x) => x.agent)).toEqual(["b", "a"]);
    expect(s[1]).toMatchObject({ total: 3, allowed: 1, denied: 1, approval: 1, tools: ["fs.read", "fs.write"] });
    expect(s[0]).toMatchObject({ denied: 1, last: "halted" });
  });

  it("builds the agent × tool matrix with each cell's latest outcome", () => {
    const m = observedMatrix(traces);
    expect(m.agents).toEqual(["a", "b"]);
    expect(m.tools).toEqual(["fs.read", "fs.write"]);
    expect(m.cells.get(cellKey("a", "fs.read"))).toMatchObject({ total: 2, last: "allow" });
    expect(m.cells.get(cellKey("a", "fs.write"))).toMatchObject({ last: "human_approval:approved" });
    expect(m.cells.has(cellKey("b", "fs.read"))).toBe(false);
  });

  it("joins the policy decisions with what one agent was seen doing", () => {
    const decision: ToolDecision = { name: "fs.read", source: "mcp", action: "allow", rule: "p:rule[0]", conditional: null, rule_index: 0 };
    const rows = agentRights("a", [decision, { ...decision, name: "fs.list" }], traces);
    expect(rows.map((r) => [r.tool, r.decision?.action ?? null, r.observed.total])).toEqual([
      ["fs.list", "allow", 0],
      ["fs.read", "allow", 2],
      ["fs.write", null, 1],
    ]);
  });
});
