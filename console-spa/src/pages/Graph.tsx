// The dependency graph (agents, tools, upstreams; declared, inferred and served_by edges) drawn with
// cytoscape, loaded on this page only so the other pages stay small. Selecting a node (on the canvas or in
// the list beside it) asks /governance/impact what would break without it.
import { useEffect, useMemo, useRef, useState } from "react";
import type { Core } from "cytoscape";
import { useGraph, useImpact, type Graph, type GraphNode, type NodeType } from "../api/governance";
import { Section } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { columnLayout, LABEL_GAP, labelSide, NODE_SIZE } from "../lib/graphLayout";
import { Link, navigate, parseHash, pathSeg, useLocation } from "../router";
import { StateBadge } from "./Catalog";

const KINDS: [NodeType, string][] = [
  ["agent", "Agents"],
  ["tool", "Tools"],
  ["upstream", "Upstreams"],
];
const EDGE_KINDS = ["declared", "inferred", "served_by"] as const;

/** The nodes of the kinds shown, and the edges between two shown nodes. */
export function visible(g: Graph, kinds: Set<string>, edgeKinds: Set<string>): Graph {
  const nodes = g.nodes.filter((n) => kinds.has(n.type));
  const ids = new Set(nodes.map((n) => n.id));
  return { nodes, edges: g.edges.filter((e) => edgeKinds.has(e.kind) && ids.has(e.source) && ids.has(e.target)) };
}

export function splitNode(id: string): { kind: string; name: string } {
  const i = id.indexOf(":");
  return i < 0 ? { kind: "", name: id } : { kind: id.slice(0, i), name: id.slice(i + 1) };
}

function canDraw(): boolean {
  try {
    return !!document.createElement("canvas").getContext("2d");
  } catch {
    return false;
  }
}

const css = (name: string, fallback: string) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;

function GraphCanvas({ graph, selected, onSelect }: { graph: Graph; selected: string; onSelect: (id: string) => void }) {
  const box = useRef<HTMLDivElement>(null);
  const cyRef = useRef<Core | null>(null);
  const [zoom, setZoom] = useState(1);
  const [failed, setFailed] = useState("");
  const [drawable] = useState(canDraw);
  const select = useRef(onSelect);
  select.current = onSelect;

  useEffect(() => {
    if (!drawable || !box.current) return;
    let cancelled = false;
    void import("cytoscape")
      .then(({ default: cytoscape }) => {
        if (cancelled || !box.current) return;
        const text = css("--text", "#1b1f24");
        const panel = css("--panel-2", "#f0f2f5");
        const at = columnLayout(graph);
        const colors: Record<string, string> = { agent: css("--accent", "#2456d6"), tool: css("--ok", "#17803d"), upstream: css("--warn", "#9a5b00") };
        const cy = cytoscape({
          container: box.current,
          elements: [
            ...graph.nodes.map((n) => ({
              data: { id: n.id, label: n.label, type: n.type, flagged: n.discovered ? 1 : 0, refused: n.state === "suspended" || n.state === "retired" ? 1 : 0 },
              position: { ...at[n.id]! },
            })),
            ...graph.edges.map((e, i) => ({ data: { id: `e${i}`, source: e.source, target: e.target, kind: e.kind, calls: e.calls ?? 0, errorRate: e.error_rate ?? 0 } })),
          ],
          style: [
            // Labels to the right of their nodes, one node per row (lib/graphLayout.ts): they cannot run into each other.
            {
              selector: "node",
              style: {
                label: "data(label)",
                color: text,
                "font-size": 11,
                "text-valign": "center",
                "text-halign": "right",
                "text-margin-x": LABEL_GAP,
                // an edge passing under a label does not cross its letters
                "text-background-color": panel,
                "text-background-opacity": 0.85,
                "text-background-padding": "1px",
                width: 18,
                height: 18,
              },
            },
            { selector: `node[type = "agent"]`, style: { "text-halign": labelSide("agent"), "text-margin-x": -LABEL_GAP } },
            ...Object.entries(colors).map(([t, c]) => ({ selector: `node[type = "${t}"]`, style: { "background-color": c } })),
            { selector: 'node[type = "tool"]', style: { shape: "round-rectangle" } },
            { selector: 'node[type = "upstream"]', style: { shape: "diamond", width: NODE_SIZE, height: NODE_SIZE } },
            { selector: "node[flagged = 1]", style: { "border-width": 3, "border-color": css("--bad", "#c0262d") } },
            { selector: "node[refused = 1]", style: { opacity: 0.5 } },
            { selector: "node:selected", style: { "border-width": 4, "border-color": css("--focus", "#ffbf47") } },
            { selector: "edge", style: { width: 1.5, "curve-style": "bezier", "target-arrow-shape": "triangle", "line-color": css("--border", "#d9dde3"), "target-arrow-color": css("--border", "#d9dde3") } },
            { selector: 'edge[kind = "inferred"]', style: { "line-color": css("--muted", "#5b6470"), "target-arrow-color": css("--muted", "#5b6470"), width: "mapData(calls, 0, 50, 1.5, 6)" } },
            { selector: 'edge[kind = "inferred"][errorRate > 0.2]', style: { "line-color": css("--bad", "#c0262d"), "target-arrow-color": css("--bad", "#c0262d") } },
            { selector: 'edge[kind = "declared"]', style: { "line-style": "dashed" } },
            { selector: 'edge[kind = "served_by"]', style: { "line-style": "dotted" } },
          ],
          layout: { name: "preset", fit: true, padding: 20, animate: false },
          // The wheel zooms at cytoscape's own pace: a custom wheelSensitivity makes it warn on every draw.
          minZoom: 0.2,
          maxZoom: 4,
        });
        cy.on("tap", "node", (e) => select.current(e.target.id()));
        cy.on("zoom", () => setZoom(cy.zoom()));
        cyRef.current = cy;
        setZoom(cy.zoom());
      })
      .catch((e: Error) => setFailed(e.message));
    return () => {
      cancelled = true;
      cyRef.current?.destroy();
      cyRef.current = null;
    };
  }, [graph, drawable]);

  useEffect(() => {
    const cy = cyRef.current;
    if (!cy) return;
    cy.$(":selected").unselect();
    if (selected) cy.getElementById(selected).select();
  }, [selected, zoom]);

  const zoomBy = (f: number) => {
    const cy = cyRef.current;
    if (cy) cy.zoom({ level: cy.zoom() * f, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } });
  };
  if (!drawable) return <p className="note note-empty">This browser cannot draw the graph (no canvas); use the list of nodes beside it.</p>;
  return (
    <>
      <div className="graph-tools" role="toolbar" aria-label="Zoom">
        <button type="button" className="btn btn-small" onClick={() => zoomBy(1.25)} aria-label="Zoom in">+</button>
        <button type="button" className="btn btn-small" onClick={() => zoomBy(0.8)} aria-label="Zoom out">−</button>
        <button type="button" className="btn btn-small" onClick={() => cyRef.current?.fit(undefined, 20)}>Fit</button>
        <span className="small muted" role="status" data-zoom={zoom.toFixed(3)}>zoom {Math.round(zoom * 100)}%</span>
        <span className="small muted">Wheel or pinch to zoom, drag to pan, click a node to see its impact.</span>
      </div>
      {failed ? <ErrorNote error={new Error(failed)} what="the graph library" /> : null}
      <div ref={box} className="graph-canvas" data-testid="graph-canvas" data-nodes={graph.nodes.length} data-edges={graph.edges.length} aria-label="Dependency graph" role="img" />
    </>
  );
}

function ImpactPanel({ node, days }: { node: string; days: number }) {
  const { kind, name } = splitNode(node);
  const q = useImpact(kind, name, days);
  return (
    <Section title={<>Impact of <span className="mono">{node}</span></>} id="impact">
      <p className="small muted">
        {kind === "upstream" ? "If this upstream is removed" : kind === "tool" ? "If this tool changes or goes away" : "If this agent is suspended"}, over the last {days} days:
      </p>
      {kind === "agent" ? <p className="small"><Link to={`/catalog/${pathSeg(name)}`}>Open the agent</Link></p> : null}
      <QueryState query={q} what="the impact">
        {(d) => (
          <div className="impact" data-calls={d.calls} data-sessions={d.sessions}>
            <p>
              <strong>{d.calls}</strong> calls in <strong>{d.sessions}</strong> sessions, {d.agents.length} agents, {d.tools.length} tools.
            </p>
            {d.agents.length ? (
              <table className="small impact-agents">
                <thead>
                  <tr>
                    <th scope="col">Agent</th>
                    <th scope="col" className="num">Calls</th>
                    <th scope="col" className="num">Sessions</th>
                  </tr>
                </thead>
                <tbody>
                  {d.agents.map((a) => (
                    <tr key={a.agent}>
                      <td><Link to={`/catalog/${pathSeg(a.agent)}`} className="mono">{a.agent}</Link></td>
                      <td className="num">{a.calls}</td>
                      <td className="num">{a.sessions}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            ) : null}
            {d.tools.length ? (
              <p className="small">
                Tools: {d.tools.map((t) => `${t.tool} (${t.calls})`).join(", ")}
              </p>
            ) : null}
            {d.declared_by?.length ? <p className="small">Declared by the entries {d.declared_by.join(", ")}.</p> : null}
            {d.dependants?.length ? <p className="small">Called as a sub-agent by {d.dependants.join(", ")}.</p> : null}
          </div>
        )}
      </QueryState>
    </Section>
  );
}

export function GraphPage() {
  const loc = useLocation();
  const days = Number(loc.query.get("days") ?? 30) || 30;
  const selected = loc.query.get("node") ?? "";
  const hidden = new Set((loc.query.get("hide") ?? "").split(",").filter(Boolean));
  const q = useGraph(days);
  // From the hash itself, not this render: two changes in one tick must both land.
  const params = (over: Record<string, string>) => ({ ...Object.fromEntries(parseHash(window.location.hash).query.entries()), ...over });
  const toggle = (k: string) => {
    const next = new Set((parseHash(window.location.hash).query.get("hide") ?? "").split(",").filter(Boolean));
    if (next.has(k)) next.delete(k);
    else next.add(k);
    navigate("/graph", params({ hide: [...next].join(",") }));
  };
  const hideKey = [...hidden].sort().join(",");
  const shown = useMemo(
    () => (q.data ? visible(q.data, new Set(KINDS.map(([k]) => k).filter((k) => !hidden.has(k))), new Set(EDGE_KINDS.filter((k) => !hidden.has(k)))) : null),
    [q.data, hideKey],
  );
  return (
    <>
      <h1>Graph</h1>
      <p className="muted small">
        Agents, tools and upstreams. Dashed edges are declared in the catalog, solid ones inferred from the trace (thicker with more calls, red above
        20% errors), dotted ones link a tool to the upstream serving it. A red ring flags a discovered agent.
      </p>
      <form className="filters" aria-label="Filter the graph" onSubmit={(e) => e.preventDefault()}>
        <fieldset className="row">
          <legend className="small muted">Nodes</legend>
          {KINDS.map(([k, label]) => (
            <label key={k} className="check">
              <input type="checkbox" checked={!hidden.has(k)} onChange={() => toggle(k)} /> {label}
            </label>
          ))}
        </fieldset>
        <fieldset className="row">
          <legend className="small muted">Edges</legend>
          {EDGE_KINDS.map((k) => (
            <label key={k} className="check">
              <input type="checkbox" checked={!hidden.has(k)} onChange={() => toggle(k)} /> {k.replace("_", " ")}
            </label>
          ))}
        </fieldset>
        <div className="field">
          <label htmlFor="g-days">Inferred from the last</label>
          <select id="g-days" value={days} onChange={(e) => navigate("/graph", params({ days: e.target.value }))}>
            {[1, 7, 30, 90].map((d) => (
              <option key={d} value={d}>{d} days</option>
            ))}
          </select>
        </div>
        <button type="button" className="btn btn-small" onClick={() => void q.refetch()}>Reload</button>
      </form>
      <QueryState query={q} what="the graph" isEmpty={(g) => g.nodes.length === 0} empty="Nothing to draw yet: no agent is declared, no tool is registered.">
        {() => (
          <div className="graph-layout">
            <Section title={`${shown!.nodes.length} nodes, ${shown!.edges.length} edges`}>
              <GraphCanvas graph={shown!} selected={selected} onSelect={(id) => navigate("/graph", params({ node: id }))} />
            </Section>
            <div>
              {selected ? <ImpactPanel node={selected} days={days} /> : <p className="note note-empty">Select a node to see what depends on it.</p>}
              <Section title="Nodes">
                <NodeList nodes={shown!.nodes} selected={selected} onSelect={(id) => navigate("/graph", params({ node: id }))} />
              </Section>
            </div>
          </div>
        )}
      </QueryState>
    </>
  );
}

function NodeList({ nodes, selected, onSelect }: { nodes: GraphNode[]; selected: string; onSelect: (id: string) => void }) {
  return (
    <ul className="node-list">
      {nodes.map((n) => (
        <li key={n.id}>
          <button type="button" className={`link-button ${n.id === selected ? "current" : ""}`} aria-current={n.id === selected ? "true" : undefined} onClick={() => onSelect(n.id)}>
            {n.id}
          </button>{" "}
          {n.discovered ? <span className="badge badge-bad">⚑ discovered</span> : n.state ? <StateBadge state={n.state} /> : null}
        </li>
      ))}
    </ul>
  );
}
