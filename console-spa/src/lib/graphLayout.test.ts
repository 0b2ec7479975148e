import { describe, expect, it } from "vitest";
import type { Graph } from "../api/governance";
import { CHAR_WIDTH, columnLayout, LABEL_GAP, labelSide, NODE_SIZE, overlaps, ROW_GAP, type Box } from "./graphLayout";

const AGENTS = ["claude", "cursor", "helper", "batch-nightly", "batch-weekly", "stranger", "ops-bot", "reporter", "triage"];
const TOOLS = ["list_pets", "create_pet", "get_pet_by_id", "delete_pet", "get_text", "get_boom", "put_notes_noteId", "echo_headers", "list_animals", "get_animal", "feed_animal", "weigh_animal", "move_animal", "vaccinate_animal", "retire_animal"];

const GRAPH: Graph = {
  nodes: [
    ...AGENTS.map((a) => ({ id: `agent:${a}`, type: "agent" as const, label: a })),
    ...TOOLS.map((t) => ({ id: `tool:${t}`, type: "tool" as const, label: t })),
    { id: "upstream:spec.json", type: "upstream", label: "spec.json" },
    { id: "upstream:zoo.json", type: "upstream", label: "zoo.json" },
  ],
  edges: [
    ...AGENTS.flatMap((a, i) => TOOLS.filter((_, j) => (i + j) % 3 === 0).map((t) => ({ source: `agent:${a}`, target: `tool:${t}`, kind: "inferred" as const, calls: 1 }))),
    ...TOOLS.map((t, j) => ({ source: `tool:${t}`, target: j < 8 ? "upstream:spec.json" : "upstream:zoo.json", kind: "served_by" as const })),
  ],
};

/** What cytoscape draws for a node at `p`: the node, and its label on its side (11 px text). */
const box = (type: string, label: string, p: { x: number; y: number }): Box => {
  const w = LABEL_GAP + label.length * CHAR_WIDTH;
  const left = labelSide(type) === "left";
  return { x1: p.x - NODE_SIZE / 2 - (left ? w : 0), y1: p.y - NODE_SIZE / 2, x2: p.x + NODE_SIZE / 2 + (left ? 0 : w), y2: p.y + NODE_SIZE / 2 };
};

describe("the graph's layout", () => {
  it("puts nine agents, fifteen tools and two upstreams where no label runs into another", () => {
    const at = columnLayout(GRAPH);
    const boxes = GRAPH.nodes.map((n) => ({ id: n.id, b: box(n.type, n.label, at[n.id]!) }));
    const clashes = boxes.flatMap((a, i) => boxes.slice(i + 1).filter((b) => overlaps(a.b, b.b)).map((b) => `${a.id} × ${b.id}`));
    expect(clashes).toEqual([]);
    // three columns, left to right, a node per row
    const xs = (type: string) => new Set(GRAPH.nodes.filter((n) => n.type === type).map((n) => at[n.id]!.x));
    const [a, t, u] = [xs("agent"), xs("tool"), xs("upstream")].map((s) => [...s]);
    expect([a!.length, t!.length, u!.length]).toEqual([1, 1, 1]);
    expect(a![0]! < t![0]! && t![0]! < u![0]!).toBe(true);
    const toolYs = TOOLS.map((x) => at[`tool:${x}`]!.y).sort((p, q) => p - q);
    expect(toolYs.every((y, i) => i === 0 || y - toolYs[i - 1]! === ROW_GAP)).toBe(true);
  });

  it("orders a column by its neighbours in the column before, so edges cross less", () => {
    const g: Graph = {
      nodes: [
        { id: "agent:a", type: "agent", label: "a" },
        { id: "agent:b", type: "agent", label: "b" },
        { id: "tool:z", type: "tool", label: "z" }, // called by a, first in its column despite its name
        { id: "tool:y", type: "tool", label: "y" },
      ],
      edges: [
        { source: "agent:a", target: "tool:z", kind: "inferred" },
        { source: "agent:b", target: "tool:y", kind: "inferred" },
      ],
    };
    const at = columnLayout(g);
    expect(at["tool:z"]!.y).toBeLessThan(at["tool:y"]!.y);
  });
});
