import { screen } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { useHalts } from "../api/queries";
import { HaltBanner } from "./HaltBanner";

function Loaded() {
  const q = useHalts();
  return q.isSuccess ? <p>loaded {q.data.length}</p> : null;
}

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

describe("HaltBanner", () => {
  it("shows a red alert naming the stop while one is in force", async () => {
    server = await serve(({ path }) =>
      path === "/halts"
        ? { status: 200, body: [{ id: "h1", scope: "agent", target: "ci-runner", reason: "runaway loop", created_at: "2026-10-01T00:00:00Z" }] }
        : undefined,
    );
    connect(server.url, "tok");
    renderWithClient(<HaltBanner />);
    const alert = await screen.findByRole("alert");
    expect(alert.className).toBe("halt-banner");
    expect(alert.textContent).toContain("Emergency stop in force.");
    expect(alert.textContent).toContain("agent ci-runner — runaway loop");
    expect(server.requests[0]!.authorization).toBe("Bearer tok");
  });

  it("shows nothing when every stop has been resumed", async () => {
    server = await serve(({ path }) =>
      path === "/halts" ? { status: 200, body: { halts: [{ id: "h0", scope: "all", created_at: "2026-10-01T00:00:00Z", resumed_at: "2026-10-01T01:00:00Z" }] } } : undefined,
    );
    connect(server.url);
    renderWithClient(
      <>
        <HaltBanner />
        <Loaded />
      </>,
    );
    // The probe shares the banner's query, so once it shows the data the banner has rendered it too.
    await screen.findByText("loaded 1");
    expect(screen.queryByRole("alert")).toBeNull();
    expect(server.requests[0]!.authorization).toBe("");
  });

  it("warns that stops cannot be checked when the admin token is refused", async () => {
    server = await serve(() => ({ status: 401, body: { error: "control plane requires admin authorization" } }));
    connect(server.url, "wrong");
    renderWithClient(<HaltBanner />);
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("the server refused the admin token");
    expect(screen.getByRole("link", { name: "Set the admin token" }).getAttribute("href")).toBe("#/settings");
  });
});
