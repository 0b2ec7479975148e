import { fireEvent, screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { UsersPage } from "./Users";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const who = (role: string) => ({ actor: role === "owner" ? "owner:admin-token" : `user:${role}`, kind: role === "owner" ? "owner" : "user", name: role, role, approve_tools: [], approve_agents: [] });
const alice = { name: "alice", role: "approver", approve_tools: ["*pet*"], approve_agents: [], source: "oidc", disabled: false };

async function render(role: string) {
  server = await serve(({ method, path, body }) => {
    if (path === "/login") return { status: 200, body: { sso: true, sso_label: "idp", session_hours: 12, who: who(role) } };
    if (method === "GET" && path === "/users") return { status: 200, body: [alice] };
    if (method === "POST" && path === "/users") return { status: 201, body: { ...(body as object), source: "local", disabled: false, token: "f7u_shown-once" } };
    return undefined;
  });
  connect(server.url);
  renderWithClient(<UsersPage />);
}

describe("the users page", () => {
  it("lets an owner add an approver with a scope and shows the new token once", async () => {
    await render("owner");
    await screen.findByText("*pet* · any agent");
    expect(screen.getByText("single sign-on")).toBeTruthy();
    fireEvent.change(screen.getByLabelText("Name"), { target: { value: "carol" } });
    fireEvent.change(screen.getByLabelText("Role"), { target: { value: "approver" } });
    fireEvent.change(screen.getByLabelText(/Approves tools/), { target: { value: "put_notes_*, files.*" } });
    fireEvent.click(screen.getByRole("button", { name: "Add" }));
    expect((await screen.findByLabelText("Personal token of carol")).textContent).toBe("f7u_shown-once");
    const posted = server!.requests.find((r) => r.method === "POST")!;
    expect(posted.body).toEqual({ name: "carol", role: "approver", approve_tools: ["put_notes_*", "files.*"], approve_agents: [], email: "" });
  });

  it("shows an admin the users without the owner's actions", async () => {
    await render("admin");
    await screen.findByText("alice");
    expect(screen.queryByRole("button", { name: "Add" })).toBeNull();
    expect(screen.queryByRole("button", { name: "Disable" })).toBeNull();
  });

  it("tells a viewer the users are not theirs to see, and never asks for them", async () => {
    await render("viewer");
    await screen.findByText("Only admins and owners see the users.");
    await waitFor(() => expect(server!.requests.some((r) => r.path === "/login")).toBe(true));
    expect(server!.requests.some((r) => r.path === "/users")).toBe(false);
  });
});
