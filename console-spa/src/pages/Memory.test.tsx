import { screen } from "@testing-library/react";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, start } from "../../scripts/fixture-server.mjs";
import { connect, renderWithClient } from "../test/harness";
import { MemoryPage } from "./Memory";

// The fixture server answers /rpc with mem7's text formats, so this runs the real parse path.
let server: Server;
beforeAll(async () => {
  server = await start(0);
  connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, ADMIN_TOKEN);
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe("memory browser", () => {
  it("shows an entry's value, its history and the chain status", async () => {
    window.location.hash = "#/memory?key=project.conventions";
    renderWithClient(<MemoryPage />);
    expect(await screen.findByText(/Use conventional commits\./)).toBeTruthy();
    expect(await screen.findByText(/written before the chain\)/)).toBeTruthy();
    expect((await screen.findByText("The memory chain holds")).parentElement!.textContent).toContain("3 sealed");
  });

  it("lists decisions from memory_list tags [decision] with outcome and resolver", async () => {
    window.location.hash = "#/memory?tab=decisions";
    renderWithClient(<MemoryPage />);
    const row = (await screen.findByText("decision.fs.write_file.8899aabbccddeeff")).closest("tr")!;
    expect(row.textContent).toContain("ci-runner");
    expect(row.textContent).toContain("denied");
    expect(row.textContent).toContain("supervisor");
    expect(screen.queryByText("project.conventions")).toBeNull();
  });
});
