import { describe, expect, it } from "vitest";
import { agentTraces, argumentsFitInline, decideState, diffLines, fourEyes, isControlPlaneEvent, mayGrant, mayWrite, type Who } from "./people";

const who = (role: string, actor = `user:${role}`): Who => ({ actor, kind: "user", name: role, role, approve_tools: [], approve_agents: [] });

describe("operators are never agents", () => {
  it("takes entries without an agent, or with an operator's actor, as control-plane events", () => {
    expect(isControlPlaneEvent({ agent_id: "" })).toBe(true);
    expect(isControlPlaneEvent({ agent_id: "user:alice" })).toBe(true);
    expect(isControlPlaneEvent({ agent_id: "owner:admin-token" })).toBe(true);
    expect(isControlPlaneEvent({ agent_id: "supervisor:sup7" })).toBe(true);
    expect(isControlPlaneEvent({ agent_id: "claude" })).toBe(false);
    expect(isControlPlaneEvent({ agent_id: "anonymous" })).toBe(false);
    const traces = [
      { agent_id: "", tool: "mesh.login" },
      { agent_id: "claude", tool: "create_pet" },
      { agent_id: "claude", tool: "mesh.approval" },
      { agent_id: "user:bob", tool: "list_pets" },
    ];
    expect(agentTraces(traces)).toEqual([{ agent_id: "claude", tool: "create_pet" }]);
  });
});

describe("what a role may do", () => {
  it("lets owners and admins write, approvers grant, viewers nothing", () => {
    expect([mayWrite(who("owner")), mayWrite(who("admin")), mayWrite(who("approver")), mayWrite(who("viewer"))]).toEqual([true, true, false, false]);
    expect([mayGrant(who("approver")), mayGrant(who("viewer"))]).toEqual([true, false]);
  });

  it("decides by the server's actionable, saying why not", () => {
    expect(decideState(who("viewer"), { actionable: true })).toEqual({ may: false, why: "Viewers read; approvers decide." });
    expect(decideState(who("approver"), { actionable: false })).toEqual({ may: false, why: "Not yours: outside your scope." });
    const voted = decideState(who("approver", "user:alice"), { actionable: false, approvals: [{ actor: "user:alice", at: "" }] });
    expect(voted).toEqual({ may: false, why: "You approved it; it waits for someone else." });
    expect(decideState(who("approver"), { actionable: true })).toEqual({ may: true });
    expect(decideState(null, {})).toEqual({ may: true });
  });
});

describe("four eyes", () => {
  it("says how far an approval that needs several humans is, and who approved", () => {
    expect(fourEyes({})).toBe("");
    expect(fourEyes({ required_approvals: 2, approvals: [] })).toBe("0 of 2 approvals");
    expect(fourEyes({ required_approvals: 2, approvals: [{ actor: "user:alice", at: "2026-01-01T00:00:00Z" }] })).toBe("1 of 2 approvals (user:alice)");
  });
});

describe("a preview's diff", () => {
  it("classifies each line of a unified diff", () => {
    const d = "--- a/pets.txt\n+++ b/pets.txt\n@@ -1,2 +1,2 @@\n Kit\n-Rex\n+Zeno\n";
    expect(diffLines(d).map((l) => l.kind)).toEqual(["meta", "meta", "hunk", "same", "del", "add"]);
  });

  it("shows small arguments open, and keeps big ones and diffs behind a click", () => {
    expect(argumentsFitInline({ name: "Kit" }, false)).toBe(true);
    expect(argumentsFitInline({ name: "Kit" }, true)).toBe(false);
    expect(argumentsFitInline({ text: "x".repeat(500) }, false)).toBe(false);
  });
});
