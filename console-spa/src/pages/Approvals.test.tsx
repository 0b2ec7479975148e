import { fireEvent, screen } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { ResolveForm } from "./Approvals";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

describe("ResolveForm", () => {
  it("posts the decision with the reasoning and the admin token", async () => {
    server = await serve(({ method, path }) =>
      method === "POST" && path === "/approvals/a1b2c3d4e5f60718/approve" ? { status: 200, body: { status: "approved", id: "a1b2c3d4e5f60718" } } : undefined,
    );
    connect(server.url, "admin-secret");
    renderWithClient(<ResolveForm id="a1b2c3d4e5f60718" />);
    fireEvent.change(screen.getByLabelText(/Reasoning/), { target: { value: "expected change" } });
    fireEvent.click(screen.getByRole("button", { name: "Approve" }));
    expect((await screen.findByRole("status")).textContent).toBe("Approved.");
    const posted = server.requests.find((r) => r.method === "POST")!;
    expect(posted.body).toEqual({ reasoning: "expected change" });
    expect(posted.authorization).toBe("Bearer admin-secret");
  });

  it("says the approval was already resolved on a 409", async () => {
    server = await serve(() => ({ status: 409, body: { error: "approval already resolved" } }));
    connect(server.url);
    renderWithClient(<ResolveForm id="x" compact />);
    fireEvent.click(screen.getByRole("button", { name: "Deny" }));
    expect((await screen.findByRole("alert")).textContent).toContain("resolved this approval already");
    expect(server.requests[0]!.body).toEqual({});
  });

  it("tells the operator the admin token was refused on a 401", async () => {
    server = await serve(() => ({ status: 401, body: { error: "control plane requires admin authorization" } }));
    connect(server.url, "stale");
    renderWithClient(<ResolveForm id="x" />);
    fireEvent.click(screen.getByRole("button", { name: "Approve" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("The server refused the admin token.");
    expect(screen.getByRole("link", { name: "Settings" }).getAttribute("href")).toBe("#/settings");
  });

  it("pre-selects the decision an email link carries and decides nothing until the person confirms", async () => {
    server = await serve(() => ({ status: 200, body: { status: "denied", id: "x" } }));
    connect(server.url);
    renderWithClient(<ResolveForm id="x" suggested="deny" />);
    expect(screen.getByText(/followed the email link to deny/).textContent).toContain("press Deny to confirm");
    expect(document.activeElement).toBe(screen.getByRole("button", { name: "Deny" }));
    expect(server.requests).toEqual([]);
  });
});
