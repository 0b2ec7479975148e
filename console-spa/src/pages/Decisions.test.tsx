import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import type { DecisionView } from "../api/types";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { DecisionsPage } from "./Decisions";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const row = (i: number, status: string, by: string): DecisionView => ({
  id: `${String(i).padStart(2, "0")}aabbccddeeff00`,
  agent_id: "claude",
  tool: "get_pet_by_id",
  params: {},
  trace_id: `${String(i).padStart(2, "0")}${"0".repeat(30)}`,
  policy_rule: "agents",
  status: status as DecisionView["status"],
  created_at: "2026-12-01T10:00:00Z",
  resolved_at: "2026-12-01T10:00:05Z",
  resolved_by: by,
  // as the server classifies it (shared/decisions/facts.py resolver_kind)
  resolver_kind: by === "supervisor:mem7" ? "mem7" : by.startsWith("system:") ? "system" : by.startsWith("supervisor:") ? "supervisor" : "human",
  fact_key: "",
});

describe("Decisions page", () => {
  it("asks the server for each filter and page, and shows each row's decision badge", async () => {
    const seen: string[] = [];
    const all = [row(1, "approved", "alice"), row(2, "timeout", "system:timeout"), row(3, "approved", "supervisor:mem7"), row(4, "denied", "supervisor:sup7")];
    server = await serve(({ path, query }) => {
      if (path !== "/approvals/decisions") return undefined;
      seen.push(query.toString());
      if (query.get("outcome") === "allow") return { status: 400, body: { error: "outcome must be one of approved, denied, timeout" } };
      const limit = Number(query.get("limit"));
      const offset = Number(query.get("offset"));
      const rows = all.filter((r) => !query.get("outcome") || r.status === query.get("outcome"));
      return { status: 200, body: { decisions: rows.slice(offset, offset + limit), total: rows.length, limit, offset } };
    });
    connect(server.url, "adm");
    window.location.hash = "#/decisions?size=25";
    renderWithClient(<DecisionsPage />);
    const timeout = await screen.findByText("refused: timed out");
    expect(timeout.className).toBe("badge badge-bad");
    expect(within(timeout.closest("tr")!).queryByText(/allow/)).toBeNull();
    expect(screen.getByText("approved by precedent").getAttribute("data-decision")).toBe("approved-precedent");
    expect(screen.getByText("1–4 of 4, newest first.")).toBeTruthy();
    expect(screen.queryByRole("navigation", { name: "Pages of decisions" })).toBeNull();

    fireEvent.change(screen.getByLabelText("Outcome"), { target: { value: "denied" } });
    fireEvent.change(screen.getByLabelText("Decided by"), { target: { value: "supervisor" } });
    fireEvent.change(screen.getByLabelText("Agent"), { target: { value: "claude" } });
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    await waitFor(() => expect(window.location.hash).toBe("#/decisions?agent=claude&outcome=denied&resolver=supervisor&size=25"));
    await screen.findByText("1–1 of 1, newest first.");
    expect(seen[0]).toBe("limit=25&offset=0");
    expect(seen.at(-1)).toBe("agent=claude&outcome=denied&resolver=supervisor&limit=25&offset=0");
    expect(server.requests.at(-1)!.authorization).toBe("Bearer adm");
  });

  it("pages on the server: Older asks for the next offset", async () => {
    const seen: string[] = [];
    server = await serve(({ path, query }) => {
      if (path !== "/approvals/decisions") return undefined;
      seen.push(query.toString());
      const offset = Number(query.get("offset"));
      return { status: 200, body: { decisions: [row(offset + 1, "approved", "alice")], total: 60, limit: 25, offset } };
    });
    connect(server.url, "adm");
    window.location.hash = "#/decisions?size=25&resolver=human";
    renderWithClient(<DecisionsPage />);
    await screen.findByText("1–25 of 60, newest first.");
    fireEvent.click(screen.getByRole("button", { name: "Older →" }));
    await screen.findByText("26–50 of 60, newest first.");
    expect(seen.at(-1)).toBe("resolver=human&limit=25&offset=25");
    expect(screen.getByText("Page 2 of 3")).toBeTruthy();
  });

  it("refuses a range that ends before it starts without asking the server", async () => {
    server = await serve(() => ({ status: 200, body: { decisions: [], total: 0, limit: 50, offset: 0 } }));
    connect(server.url, "adm");
    window.location.hash = "#/decisions?range=custom&from=2026-11-30T18:00&to=2026-11-30T08:00";
    renderWithClient(<DecisionsPage />);
    expect((await screen.findAllByRole("alert"))[0]!.textContent).toContain("must be after its start");
    expect(server.requests.filter((r) => r.path === "/approvals/decisions")).toEqual([]);
  });
});
