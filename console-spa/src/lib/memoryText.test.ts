import { describe, expect, it } from "vitest";
import {
  parseDecisionValue,
  parseForget,
  parseHistory,
  parseList,
  parseListLine,
  parseRecall,
  parseSearch,
  parseStore,
} from "./memoryText";

describe("memory_list text", () => {
  it("reads keys, tags, agent and time from each line", () => {
    const text =
      "3 memories:\n" +
      "- decision.fs.write.0011 [decision, approved, agent:claude] (by flux7-mesh) \u2014 2026-10-01T12:00:00Z\n" +
      "- plain \u2014 2026-10-02T00:00:00Z\n" +
      "- only.agent (by claude) \u2014 2026-10-03T00:00:00Z";
    expect(parseList(text)).toEqual([
      { key: "decision.fs.write.0011", tags: ["decision", "approved", "agent:claude"], agent: "flux7-mesh", updated: "2026-10-01T12:00:00Z" },
      { key: "plain", tags: [], agent: "", updated: "2026-10-02T00:00:00Z" },
      { key: "only.agent", tags: [], agent: "claude", updated: "2026-10-03T00:00:00Z" },
    ]);
  });

  it("keeps a key that itself holds brackets, dashes and spaces", () => {
    expect(parseListLine("- notes [draft] \u2014 x [t1] \u2014 2026-01-01T00:00:00Z")).toEqual({
      key: "notes [draft] \u2014 x",
      tags: ["t1"],
      agent: "",
      updated: "2026-01-01T00:00:00Z",
    });
  });

  it("treats 'No memories found.' as an empty list", () => {
    expect(parseList("No memories found.")).toEqual([]);
  });
});

describe("memory_recall and memory_search blocks", () => {
  it("splits blocks with multi-line values, tags and agent", () => {
    const text =
      "## project.conventions\nUse conventional commits.\n\nTests live next to the code.\nTags: project, style\nAgent: claude\nUpdated: 2026-10-01T12:00:00Z\n\n" +
      "## bare\njust a value\nUpdated: 2026-10-02T12:00:00Z\n\n";
    expect(parseRecall(text)).toEqual([
      { key: "project.conventions", value: "Use conventional commits.\n\nTests live next to the code.", tags: ["project", "style"], agent: "claude", updated: "2026-10-01T12:00:00Z" },
      { key: "bare", value: "just a value", tags: [], agent: "", updated: "2026-10-02T12:00:00Z" },
    ]);
  });

  it("does not end a block at an Updated: line inside the value", () => {
    const text = "## k\nline one\nUpdated: 2020-01-01T00:00:00Z\nmore text\nUpdated: 2026-10-01T12:00:00Z\n\n";
    const [b] = parseRecall(text);
    expect(b!.value).toBe("line one\nUpdated: 2020-01-01T00:00:00Z\nmore text");
    expect(b!.updated).toBe("2026-10-01T12:00:00Z");
  });

  it("reads the search header's count and the blocks after it", () => {
    const text = "2 results (ranked by relevance):\n\n## a\nalpha\nTags: x\nUpdated: 2026-10-01T00:00:00Z\n\n## b\nbeta\nAgent: bot\nUpdated: 2026-10-02T00:00:00Z\n\n";
    const r = parseSearch(text);
    expect(r.count).toBe(2);
    expect(r.blocks.map((b) => [b.key, b.value, b.tags, b.agent])).toEqual([
      ["a", "alpha", ["x"], ""],
      ["b", "beta", [], "bot"],
    ]);
  });

  it("gives no result for 'No memories found.'", () => {
    expect(parseSearch("No memories found.")).toEqual({ count: 0, blocks: [] });
    expect(parseRecall("No memories found.\n")).toEqual([]);
  });
});

describe("memory_history text", () => {
  it("reads every kind of event line", () => {
    const text =
      "History of k (4 events, oldest first):\n" +
      "- 2026-01-01T00:00:00Z store by claude \u00b7 trace 0af7651916cd43dd8448eb211c80319c \u00b7 unsealed (written before the chain)\n" +
      "- 2026-01-02T00:00:00Z update \u00b7 valid 2026-01-01T00:00:00Z \u2192 2026-02-01T00:00:00Z \u00b7 seal 0123456789ab\n" +
      "- 2026-01-03T00:00:00Z delete by admin \u00b7 seal aaaaaaaaaaaa\n" +
      "- 2026-01-04T00:00:00Z delete by tags a, b by ops \u00b7 seal bbbbbbbbbbbb";
    const h = parseHistory(text);
    expect(h.key).toBe("k");
    expect(h.count).toBe(4);
    expect(h.events).toEqual([
      { when: "2026-01-01T00:00:00Z", what: "store", tags: [], agent: "claude", valid: "", trace: "0af7651916cd43dd8448eb211c80319c", seal: "", unsealed: true },
      { when: "2026-01-02T00:00:00Z", what: "update", tags: [], agent: "", valid: "2026-01-01T00:00:00Z \u2192 2026-02-01T00:00:00Z", trace: "", seal: "0123456789ab", unsealed: false },
      { when: "2026-01-03T00:00:00Z", what: "delete", tags: [], agent: "admin", valid: "", trace: "", seal: "aaaaaaaaaaaa", unsealed: false },
      { when: "2026-01-04T00:00:00Z", what: "delete by tags", tags: ["a", "b"], agent: "ops", valid: "", trace: "", seal: "bbbbbbbbbbbb", unsealed: false },
    ]);
  });

  it("gives no event for 'No history.'", () => {
    expect(parseHistory("No history.").events).toEqual([]);
  });
});

describe("write results", () => {
  it("reads memory_forget and memory_store confirmations", () => {
    expect(parseForget("Removed 2 memory(ies). 40 remaining.")).toEqual({ removed: 2, remaining: 40 });
    expect(parseForget("No matching memories found.")).toEqual({ removed: 0, remaining: null });
    expect(parseStore("Memory 'a.b' updated (12 total entries)")).toEqual({ key: "a.b", created: false, total: 12 });
  });
});

describe("decision memories", () => {
  it("reads the mesh's decision sentence with its em dash", () => {
    expect(parseDecisionValue("approved by alice \u2014 agent:claude tool:fs.write reason:looks fine")).toEqual({
      outcome: "approved",
      by: "alice",
      agent: "claude",
      tool: "fs.write",
      reason: "looks fine",
    });
    expect(parseDecisionValue("timed out by system:timeout \u2014 agent:bot tool:x")?.outcome).toBe("timed out");
  });

  it("reads sup7's JSON decision and rejects anything else", () => {
    const v = JSON.stringify({ approval_id: "1", agent_id: "bot", tool: "gh.pr", decision: "denied", rule_matched: "r1", reasoning: "no", confidence: 0.9 });
    expect(parseDecisionValue(v)).toEqual({ outcome: "denied", by: "supervisor (r1)", agent: "bot", tool: "gh.pr", reason: "no" });
    expect(parseDecisionValue("just a note")).toBeNull();
  });
});
