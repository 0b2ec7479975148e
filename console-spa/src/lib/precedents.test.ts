import { describe, expect, it } from "vitest";
import type { ApprovalPrecedents } from "../api/types";
import { precedentCounts } from "./precedents";

const base: ApprovalPrecedents = {
  approval_id: "a1",
  tool: "create_pet",
  agent: "claude",
  rule: { would_auto_approve: false, reasons: ["not a read tool (write)"], auto_approve: true, eligible: false, injection_risk: false, min_approvals: 2, human_approvals: 0, refusals: 0 },
  decisions: [],
};
const row = (status: string, counts: boolean) => ({ approval_id: "x", status, resolved_by: "bob", kind: "human", resolved_at: "2026-12-01T00:00:00Z", trace_id: "t", source: "ledger" as const, in_memory: true, counts, note: counts ? "counts" : "a refusal: blocks auto-approval" });

describe("the precedent summary", () => {
  it("counts the refusals its rows show, even when the rule stopped before reading memory", () => {
    const p = { ...base, decisions: [row("denied", false), row("approved", true), row("timeout", false)] };
    expect(precedentCounts(p)).toEqual({ approvals: 0, refusals: 1 });
  });

  it("keeps the server's count when memory holds more refusals than the rows show", () => {
    const p = { ...base, rule: { ...base.rule, human_approvals: null, refusals: 3 }, decisions: [row("denied", false), row("approved", true)] };
    expect(precedentCounts(p)).toEqual({ approvals: 1, refusals: 3 });
  });
});
