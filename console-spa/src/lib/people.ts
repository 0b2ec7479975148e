// Who is at the console and what they may do: the principal the server names (GET /login's `who`), the
// operators that act on the control plane (never agents), a four-eyes approval's progress, a preview's diff.
import type { ApprovalView, TraceEntry } from "../api/types";

export type Role = "owner" | "admin" | "approver" | "viewer" | "supervisor";

export interface Who {
  actor: string;
  kind: string;
  name: string;
  role: Role | string;
  approve_tools: string[];
  approve_agents: string[];
}

const OPERATOR = /^(user|owner|supervisor|system|mesh|loopback):/;

/** An actor that is a person or the server itself (`user:alice`, `owner:admin-token`, `supervisor:sup7`). */
export const isOperator = (actor: string | undefined | null): boolean => !!actor && OPERATOR.test(actor);

/** A control-plane event (a login, a grant, a halt, an approval settled): it has no agent, its actor is in
 *  `user_id`. Such entries are never counted or listed as an agent's. */
export const isControlPlaneEvent = (t: Pick<TraceEntry, "agent_id">): boolean => !t.agent_id || isOperator(t.agent_id);

/** An agent's own tool call: not a control-plane event, nor one about an agent (`mesh.approval`, `mesh.grant`,
 *  whose user_id is the operator who acted). What the agent lists and matrices count. */
export const isAgentCall = (t: Pick<TraceEntry, "agent_id" | "tool">): boolean => !isControlPlaneEvent(t) && !t.tool.startsWith("mesh.");

export const agentTraces = <T extends Pick<TraceEntry, "agent_id" | "tool">>(traces: T[]): T[] => traces.filter(isAgentCall);

/** May change the control plane (policies, halts, grants to anyone, settings). Unknown: the admin token of an
 *  older server, which has every right. */
export const mayWrite = (who: Who | null | undefined): boolean => !who || who.role === "owner" || who.role === "admin";

export const mayGrant = (who: Who | null | undefined): boolean => mayWrite(who) || who?.role === "approver";

export const manageUsers = (who: Who | null | undefined): boolean => !who || who.role === "owner";

export const readsUsers = (who: Who | null | undefined): boolean => mayWrite(who);

export type DecideState = { may: true } | { may: false; why: string };

/** Whether this principal may decide this pending approval now, as the server says (`actionable`), and why not. */
export function decideState(who: Who | null | undefined, a: Pick<ApprovalView, "actionable" | "approvals">): DecideState {
  if (who?.role === "viewer") return { may: false, why: "Viewers read; approvers decide." };
  if (a.actionable === false) {
    if (who && a.approvals?.some((v) => v.actor === who.actor)) return { may: false, why: "You approved it; it waits for someone else." };
    return { may: false, why: "Not yours: outside your scope." };
  }
  return { may: true };
}

/** "1 of 2 approvals (user:alice)" for a four-eyes approval, "" for a one-person one. */
export function fourEyes(a: Pick<ApprovalView, "required_approvals" | "approvals">): string {
  const need = a.required_approvals ?? 1;
  if (need <= 1) return "";
  const votes = a.approvals ?? [];
  return `${votes.length} of ${need} approvals${votes.length ? ` (${votes.map((v) => v.actor).join(", ")})` : ""}`;
}

export type DiffLine = { kind: "add" | "del" | "hunk" | "meta" | "same"; text: string };

/** A unified diff's lines, each with its kind (added, removed, a hunk header, a file header, unchanged). */
export function diffLines(diff: string): DiffLine[] {
  const lines = diff.replace(/\r\n/g, "\n").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines.map((text) => {
    if (text.startsWith("+++") || text.startsWith("---") || text.startsWith("diff ") || text.startsWith("index ")) return { kind: "meta", text };
    if (text.startsWith("@@")) return { kind: "hunk", text };
    if (text.startsWith("+")) return { kind: "add", text };
    if (text.startsWith("-")) return { kind: "del", text };
    return { kind: "same", text };
  });
}

/** Arguments small enough to show open at once; bigger ones (and any diff) wait for a click, and so does
 *  Approve: nobody approves what they have not seen. */
export function argumentsFitInline(params: unknown, hasPreview: boolean): boolean {
  if (hasPreview) return false;
  if (params === null || params === undefined) return true;
  const text = JSON.stringify(params) ?? "";
  return text.length <= 240 && text.split(",").length <= 6;
}
