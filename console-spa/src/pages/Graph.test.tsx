import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import type { Graph } from "../api/governance";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { GraphPage, visible } from "./Graph";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const GRAPH: Graph = {
  nodes: [
    { id: "agent:claude", type: "agent", label: "claude", declared: true, state: "active", glob: false, discovered: false },
    { id: "agent:stranger", type: "agent", label: "stranger", declared: false, discovered: true },
    { id: "tool:list_pets", type: "tool", label: "list_pets" },
    { id: "tool:get_boom", type: "tool", label: "get_boom" },
    { id: "upstream:spec.json", type: "upstream", label: "spec.json" },
  ],
  edges: [
    { source: "agent:claude", target: "tool:list_pets", kind: "declared" },
    { source: "agent:claude", target: "tool:get_boom", kind: "inferred", calls: 2, errors: 2, error_rate: 1, last_seen: "2026-12-01T10:00:00Z" },
    { source: "agent:stranger", target: "tool:list_pets", kind: "inferred", calls: 1, errors: 0, error_rate: 0, last_seen: "2026-12-01T10:00:00Z" },
    { source: "tool:list_pets", target: "upstream:spec.json", kind: "served_by" },
    { source: "tool:get_boom", target: "upstream:spec.json", kind: "served_by" },
  ],
};

const listed = () => [...document.querySelectorAll(".node-list li button")].map((b) => b.textContent);

describe("Graph page", () => {
  it("keeps only the edges between shown nodes of the shown kinds", () => {
    const g = visible(GRAPH, new Set(["agent", "tool"]), new Set(["inferred", "declared", "served_by"]));
    expect(g.nodes.map((n) => n.type)).not.toContain("upstream");
    expect(g.edges.map((e) => e.kind)).toEqual(["declared", "inferred", "inferred"]);
    expect(visible(GRAPH, new Set(["agent", "tool", "upstream"]), new Set(["inferred"])).edges.length).toBe(2);
  });

  it("filters nodes by kind, and selecting a node asks the impact endpoint and shows who would break", async () => {
    const asked: string[] = [];
    server = await serve(({ path, query }) => {
      if (path === "/governance/graph") return { status: 200, body: GRAPH };
      if (path === "/governance/impact") {
        asked.push(query.toString());
        return {
          status: 200,
          body: { kind: "tool", name: "list_pets", days: 30, calls: 7, sessions: 3, tools: [{ tool: "list_pets", calls: 7 }], agents: [{ agent: "claude", calls: 5, sessions: 2 }, { agent: "stranger", calls: 2, sessions: 1 }], declared_by: ["claude"] },
        };
      }
      return undefined;
    });
    connect(server.url, "adm");
    window.location.hash = "#/graph";
    renderWithClient(<GraphPage />);
    await screen.findByText("5 nodes, 5 edges", undefined, { timeout: 5000 });
    expect(listed()).toEqual(["agent:claude", "agent:stranger", "tool:list_pets", "tool:get_boom", "upstream:spec.json"]);
    const stranger = screen.getByRole("button", { name: "agent:stranger" }).closest("li") as HTMLElement;
    expect(within(stranger).getByText("⚑ discovered")).toBeTruthy();
    expect(screen.getByText("Select a node to see what depends on it.")).toBeTruthy();

    fireEvent.click(screen.getByLabelText("Upstreams"));
    fireEvent.click(screen.getByLabelText("declared"));
    await screen.findByText("4 nodes, 2 edges");
    expect(window.location.hash).toBe("#/graph?hide=upstream%2Cdeclared");
    expect(listed()).not.toContain("upstream:spec.json");

    fireEvent.click(screen.getByRole("button", { name: "tool:list_pets" }));
    const impact = await screen.findByText((_, el) => el?.tagName === "P" && el.textContent === "7 calls in 3 sessions, 2 agents, 1 tools.");
    expect(impact).toBeTruthy();
    expect(asked).toEqual(["kind=tool&name=list_pets&days=30"]);
    expect(screen.getByText("Declared by the entries claude.")).toBeTruthy();
    expect(screen.getByRole("link", { name: "stranger" }).getAttribute("href")).toBe("#/catalog/stranger");
    expect(screen.getByRole("button", { name: "tool:list_pets" }).getAttribute("aria-current")).toBe("true");
    expect(window.location.hash).toContain("node=tool%3Alist_pets");
  });

  it("shows the server's refusal of an impact question", async () => {
    server = await serve(({ path }) => {
      if (path === "/governance/graph") return { status: 200, body: GRAPH };
      if (path === "/governance/impact") return { status: 404, body: { error: "upstream 'pets' is neither configured nor seen in the last 30 days" } };
      return undefined;
    });
    connect(server.url, "adm");
    window.location.hash = "#/graph?node=upstream%3Apets";
    renderWithClient(<GraphPage />);
    await waitFor(() => expect(screen.getByRole("alert").textContent).toContain("neither configured nor seen"));
  });
});
