import { describe, expect, it } from "vitest";
import { groupByAgent, narrows, nextStates, orderChanges, sideBySide } from "./governance";

describe("governance helpers", () => {
  it("pairs removed and added lines side by side with their line numbers", () => {
    const rows = sideBySide("--- a\n+++ b\n@@ -1,3 +1,4 @@\n keep\n-old\n+new\n+extra\n tail\n");
    expect(rows.map((r) => r.kind)).toEqual(["hunk", "same", "change", "add", "same"]);
    expect(rows[2]).toMatchObject({ left: "old", right: "new", leftNo: 2, rightNo: 2 });
    expect(rows[3]).toMatchObject({ left: null, right: "extra", rightNo: 3 });
    expect(rows[4]).toMatchObject({ left: "tail", leftNo: 3, rightNo: 4 });
    expect(sideBySide("")).toEqual([]);
  });

  it("orders breaking before expanding before neutral, keeping the server's order within a class", () => {
    const c = (cls: "breaking" | "expanding" | "neutral", subject: string) => ({ class: cls, kind: "k", subject, detail: "", affected_agents: [] });
    expect(orderChanges([c("neutral", "a"), c("breaking", "b"), c("expanding", "c"), c("breaking", "d")]).map((x) => x.subject)).toEqual(["b", "d", "c", "a"]);
  });

  it("knows which transitions narrow and which lifecycle moves exist", () => {
    expect(narrows("allow", "human_approval")).toBe(true);
    expect(narrows("human_approval", "deny")).toBe(true);
    expect(narrows("deny", "allow")).toBe(false);
    expect(nextStates("proposed")).toEqual(["active", "retired"]);
    expect(nextStates("suspended")).toEqual(["active", "retired"]);
    expect(nextStates("retired")).toEqual([]);
  });

  it("groups replay changes by agent, most calls first", () => {
    const g = (agent: string, tool: string, from: string, to: string, count: number) => ({ agent, tool, from, to, rule_before: "", rule_after: "", count, trace_ids: [] });
    const out = groupByAgent([g("b", "t1", "deny", "allow", 1), g("a", "t2", "deny", "allow", 1), g("a", "t3", "allow", "deny", 2)]);
    expect(out.map((x) => [x.agent, x.count])).toEqual([["a", 3], ["b", 1]]);
    expect(out[0]!.groups.map((x) => x.tool)).toEqual(["t3", "t2"]);
  });
});
