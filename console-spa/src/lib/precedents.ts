// The summary above an approval's precedents, counted the way its rows are: the server counts refusals only when
// the rule got as far as reading memory (a write tool stops at "not a read tool"), while every denied row below
// says it blocks, so the summary takes the rows too.
import type { ApprovalPrecedents } from "../api/types";

export function precedentCounts(p: ApprovalPrecedents): { approvals: number; refusals: number } {
  const blocking = p.decisions.filter((d) => d.status === "denied").length;
  const counted = p.decisions.filter((d) => d.counts).length;
  return { approvals: p.rule.human_approvals ?? counted, refusals: Math.max(p.rule.refusals, blocking) };
}
