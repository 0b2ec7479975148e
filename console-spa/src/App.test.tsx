import { act, screen } from "@testing-library/react";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, start } from "../scripts/fixture-server.mjs";
import { App } from "./App";
import { connect, renderWithClient } from "./test/harness";

let server: Server;
beforeAll(async () => {
  server = await start(0);
  connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, ADMIN_TOKEN);
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe("App", () => {
  it("routes by hash, marks the current page in the nav, and shows the stop banner on every page", async () => {
    window.location.hash = "#/grants";
    renderWithClient(<App />);
    expect(await screen.findByRole("heading", { level: 1, name: "Grants" })).toBeTruthy();
    expect(screen.getByRole("link", { name: "Grants", current: "page" })).toBeTruthy();
    expect((await screen.findByText("Emergency stop in force.")).closest(".halt-banner")).toBeTruthy();
    await act(async () => {
      window.location.hash = "#/halts";
      window.dispatchEvent(new HashChangeEvent("hashchange"));
    });
    expect(await screen.findByRole("heading", { level: 1, name: "Emergency stop" })).toBeTruthy();
    expect(screen.getByText("Emergency stop in force.")).toBeTruthy();
  });

  it("answers an unknown route with a way back", async () => {
    window.location.hash = "#/nowhere";
    renderWithClient(<App />);
    expect(screen.getByText("/nowhere")).toBeTruthy();
    expect(screen.getByRole("link", { name: "Go to the overview" }).getAttribute("href")).toBe("#/");
  });
});
