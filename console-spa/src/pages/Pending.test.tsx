import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import type { ApprovalView } from "../api/types";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { PendingTable } from "./Approvals";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const who = (name: string, role: string) => ({ actor: `user:${name}`, kind: "user", name, role, approve_tools: [], approve_agents: [] });

const base: ApprovalView = {
  id: "a1b2c3d4e5f60718",
  agent_id: "claude",
  tool: "create_pet",
  params: { name: "Kit" },
  policy_rule: "agents",
  status: "pending",
  created_at: "2026-01-01T00:00:00Z",
  remaining: "1m0s",
  actionable: true,
};

async function render(items: ApprovalView[], role: string, name = "alice") {
  server = await serve(({ path }) => (path === "/login" ? { status: 200, body: { sso: false, sso_label: "", session_hours: 12, who: who(name, role) } } : undefined));
  connect(server.url);
  renderWithClient(<PendingTable items={items} fetchedAt={Date.now()} />);
  await waitFor(() => expect(server!.requests.some((r) => r.path === "/login")).toBe(true));
}

describe("the pending list", () => {
  it("shows a call's arguments inline and lets an approver decide it", async () => {
    await render([base], "approver");
    const row = screen.getByRole("row", { name: /create_pet/ });
    expect(within(row).getByText("Kit")).toBeTruthy();
    await waitFor(() => expect((within(row).getByRole("button", { name: "Approve" }) as HTMLButtonElement).disabled).toBe(false));
  });

  it("gives a viewer no decision to take", async () => {
    await render([base], "viewer", "bob");
    await screen.findByText("Viewers read; approvers decide.");
    expect(screen.queryByRole("button", { name: "Approve" })).toBeNull();
    expect(screen.queryByRole("button", { name: "Deny" })).toBeNull();
  });

  it("shows a call outside the approver's scope as not theirs", async () => {
    await render([{ ...base, actionable: false }], "approver", "carol");
    await screen.findByText("Not yours: outside your scope.");
    expect(screen.queryByRole("button", { name: "Approve" })).toBeNull();
  });

  it("says how far a four-eyes approval is and who approved", async () => {
    const a = { ...base, required_approvals: 2, approvals: [{ actor: "user:alice", at: "2026-01-01T00:00:01Z" }], actionable: false };
    await render([a], "approver", "alice");
    expect(screen.getByText("1 of 2 approvals (user:alice)")).toBeTruthy();
    await screen.findByText("You approved it; it waits for someone else.");
  });

  it("keeps Approve off until the arguments and the diff are open, then shows the diff coloured by line", async () => {
    const a = { ...base, preview: { kind: "diff", path: "pets.txt", diff: "--- a/pets.txt\n+++ b/pets.txt\n@@ -1 +1 @@\n-Rex\n+Zeno\n" } };
    await render([a], "approver");
    const approve = (await screen.findByRole("button", { name: "Approve" })) as HTMLButtonElement;
    expect(approve.disabled).toBe(true);
    expect(approve.title).toContain("nobody approves blind");
    fireEvent.click(screen.getByText("Arguments (1) and the diff"));
    await waitFor(() => expect(approve.disabled).toBe(false));
    const diff = screen.getByLabelText(/Diff of pets.txt: 1 lines added, 1 removed/);
    expect([...diff.querySelectorAll("[data-kind]")].map((l) => l.getAttribute("data-kind"))).toEqual(["meta", "meta", "hunk", "del", "add"]);
  });
});
