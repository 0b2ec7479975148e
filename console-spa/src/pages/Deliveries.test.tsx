import { fireEvent, screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { DeliveriesSection } from "./Deliveries";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const who = (role: string) => ({ actor: role === "owner" ? "owner:admin-token" : `user:${role}`, kind: role === "owner" ? "owner" : "user", name: role, role, approve_tools: [], approve_agents: [] });
const given_up = { seq: 41, lane: "slack", kind: "slack.post", approval_id: "3f9c2a7b1d4e5f60", status: "failed", attempts: 20, last_error: "slack: invalid_auth", created_at: 1_796_464_800, next_attempt_at: null };
const retrying = { seq: 42, lane: "email", kind: "email", approval_id: "aa11", status: "queued", attempts: 3, last_error: "SMTP 451", created_at: 1_796_464_801, next_attempt_at: 4_102_444_800 };

async function render(role: string, deliveries: unknown[] = [given_up, retrying], lanes = ["slack", "email"]) {
  let rows = deliveries;
  server = await serve(({ method, path }) => {
    if (path === "/login") return { status: 200, body: { sso: false, session_hours: 12, who: who(role) } };
    if (method === "GET" && path === "/notifications/deliveries") return { status: 200, body: { lanes, deliveries: rows } };
    if (method === "POST" && path === "/notifications/deliveries/41/retry") {
      rows = [retrying];
      return { status: 200, body: { ...given_up, status: "queued", attempts: 0 } };
    }
    return undefined;
  });
  connect(server.url);
  renderWithClient(<DeliveriesSection />);
}

describe("notification deliveries", () => {
  it("shows an admin what was given up and why, and retries it", async () => {
    await render("admin");
    expect((await screen.findByRole("alert")).textContent).toContain("1 delivery was given up");
    expect(screen.getByText("slack: invalid_auth")).toBeTruthy();
    expect(screen.getByText("given up")).toBeTruthy();
    expect(screen.getByText("retrying")).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Retry" }));
    expect((await screen.findByRole("status")).textContent).toContain("Queued again: delivery 41");
    await waitFor(() => expect(screen.queryByText("slack: invalid_auth")).toBeNull());
    expect(server!.requests.filter((r) => r.method === "POST").map((r) => r.path)).toEqual(["/notifications/deliveries/41/retry"]);
  });

  it("lets a viewer read but not retry", async () => {
    await render("viewer");
    await screen.findByText("slack: invalid_auth");
    await waitFor(() => expect(server!.requests.some((r) => r.path === "/login")).toBe(true));
    expect(screen.queryByRole("button", { name: "Retry" })).toBeNull();
  });

  it("says when nothing is owed, and when notifications are off", async () => {
    await render("admin", []);
    await screen.findByText(/Nothing owed/);
    await server!.close();
    server = null;
    document.body.innerHTML = "";
    await render("admin", [], []);
    await screen.findByText(/No notifications are configured on this server/);
  });
});
