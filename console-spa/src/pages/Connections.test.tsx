import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { ConnectionsPage } from "./Connections";

const DOC = "https://claude.ai/oauth/mcp-client.json";
let server: TestServer | null = null;
let asked: string[] = []; // what window.confirm asked
let deletedIds: string[] = []; // the client_id of each DELETE /oauth/clients
beforeEach(() => {
  asked = [];
  deletedIds = [];
});
afterEach(async () => {
  await server?.close();
  server = null;
});

const client = (client_id: string, client_name: string) => ({
  client_id,
  client_name,
  redirect_uris: ["https://claude.ai/api/mcp/auth_callback"],
  redirect_hosts: ["claude.ai"],
  token_endpoint_auth_method: "none",
  created_at: 1_700_000_000,
});

const start = async () => {
  server = await serve(({ method, path, query }) => {
    if (method === "GET" && path === "/oauth/tokens") {
      return { status: 200, body: [{ id: "oc_1", client_id: DOC, client_name: "Claude", agent_id: "claude", granted_by: "user:alice", created_at: 1_700_000_000, last_used_at: null, expires_at: null, refresh_expires_at: null, state: "active", revoked_by: "" }] };
    }
    if (method === "GET" && path === "/oauth/clients") {
      return { status: 200, body: [client(DOC, "Claude"), client("f7c_1", "Cursor")].filter((c) => !deletedIds.includes(c.client_id)) };
    }
    if (method === "DELETE" && path === "/oauth/clients") {
      deletedIds.push(query.get("client_id") ?? "");
      return { status: 200, body: client(deletedIds.at(-1)!, "") };
    }
    return undefined;
  });
  connect(server.url, "adm1n");
  renderWithClient(<ConnectionsPage />);
  await screen.findByText("Cursor");
};

describe("the Connections page", () => {
  it("deletes a client by its id in the query, a metadata document's URL included", async () => {
    window.confirm = (message?: string) => (asked.push(String(message)), true);
    await start();
    const row = screen.getByText(DOC).closest("tr")!;
    fireEvent.click(within(row).getByRole("button", { name: "Delete" }));
    await waitFor(() => expect(deletedIds).toEqual([DOC]));
    expect(server!.requests.find((r) => r.method === "DELETE")!.path).toBe("/oauth/clients");
    expect(asked[0]).toContain("its document is fetched again when it next asks");
    await waitFor(() => expect(screen.queryByText(DOC)).toBeNull());
    expect(screen.getByText("Cursor")).toBeTruthy();
  });

  it("asks before deleting a registered client, and sends nothing when the human says no", async () => {
    window.confirm = (message?: string) => (asked.push(String(message)), false);
    await start();
    const row = screen.getByText("f7c_1").closest("tr")!;
    fireEvent.click(within(row).getByRole("button", { name: "Delete" }));
    expect(asked[0]).toContain("it must register again");
    expect(server!.requests.filter((r) => r.method === "DELETE")).toEqual([]);
    expect(deletedIds).toEqual([]);
  });
});
