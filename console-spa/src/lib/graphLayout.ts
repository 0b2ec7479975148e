// Where the Graph page puts its nodes: three columns (agents, the tools they call, the upstreams serving them),
// one node per row, each label beside its node on the side away from the edges it sends (agents' on the left,
// the others' on the right). Labels on one row per node cannot overlap, however many tools there are (a
// breadth-first layout put 15 tools side by side on one line, their labels running into each other). Within a
// column, nodes follow the mean row of their neighbours in the column before, so edges cross less.
import type { Graph } from "../api/governance";

export const ROW_GAP = 30; // px between rows at zoom 1: a node is 18-24 px, a label 11 px text
export const CHAR_WIDTH = 7; // px per label character at 11 px, a little over the average of system sans fonts
export const NODE_SIZE = 24;
export const LABEL_GAP = 6; // px between a node and its label
const COLUMN_GAP = 90; // px of edges between a column (with its labels on the right) and the next column's nodes
const ORDER = ["agent", "tool", "upstream"] as const;

/** Agents send their edges to the right, so their labels sit on the left. */
export const labelSide = (type: string): "left" | "right" => (type === "agent" ? "left" : "right");

export interface Placed {
  x: number;
  y: number;
}

export const labelWidth = (label: string) => label.length * CHAR_WIDTH;

export function columnLayout(g: Graph): Record<string, Placed> {
  const neighbours = new Map<string, string[]>();
  for (const e of g.edges) {
    neighbours.set(e.source, [...(neighbours.get(e.source) ?? []), e.target]);
    neighbours.set(e.target, [...(neighbours.get(e.target) ?? []), e.source]);
  }
  const out: Record<string, Placed> = {};
  const row = new Map<string, number>();
  let x = 0;
  for (const type of ORDER) {
    const nodes = g.nodes.filter((n) => n.type === type);
    if (!nodes.length) continue;
    const rank = (id: string) => {
      const rows = (neighbours.get(id) ?? []).map((n) => row.get(n)).filter((r): r is number => r !== undefined);
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Number.POSITIVE_INFINITY;
    };
    const sorted = [...nodes].sort((a, b) => rank(a.id) - rank(b.id) || a.label.localeCompare(b.label));
    sorted.forEach((n, i) => {
      row.set(n.id, i);
      out[n.id] = { x, y: (i - (sorted.length - 1) / 2) * ROW_GAP };
    });
    const labels = labelSide(type) === "right" ? LABEL_GAP + Math.max(...nodes.map((n) => labelWidth(n.label))) : 0;
    x += NODE_SIZE + labels + COLUMN_GAP * (type === "agent" ? 2 : 1);
  }
  return out;
}

export interface Box {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}

export const overlaps = (a: Box, b: Box) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
