import { fireEvent, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { leave, OAuthConsentPage } from "./OAuthConsent";

let server: TestServer | null = null;
let went: string[] = [];
beforeEach(() => {
  window.location.hash = "#/oauth/consent?request=orq_1";
  went = [];
  leave.to = (url: string) => void went.push(url);
});
afterEach(async () => {
  await server?.close();
  server = null;
});

const view = (agent: string, clientId = "f7c_1") => ({
  id: "orq_1",
  state: "pending",
  client: { client_id: clientId, client_name: "Claude", redirect_uris: ["https://claude.ai/api/mcp/auth_callback"], redirect_hosts: ["claude.ai"], token_endpoint_auth_method: "none", created_at: 1_700_000_000 },
  redirect_uri: "https://claude.ai/api/mcp/auth_callback",
  redirect_host: "claude.ai",
  agent,
  proposed_agent: "claude",
  scopes: ["mcp"],
  requested_scope: "claudeai",
  resource: "https://mesh.example.com/mcp",
  policies: agent === "nobody" ? [] : [{ name: "agents", agent: "*" }],
  active_connections: agent === "claude" ? 1 : 0,
  created_at: 1_700_000_000,
  expires_at: 1_700_000_900,
});

const start = async (clientId = "f7c_1") => {
  server = await serve(({ method, path, query }) => {
    if (method === "GET" && path === "/oauth/requests/orq_1") return { status: 200, body: view(query.get("agent") || "claude", clientId) };
    if (method === "POST" && path === "/oauth/requests/orq_1/approve") {
      return { status: 200, body: { id: "orq_1", state: "approved", agent: "claude-ops", redirect_to: "https://claude.ai/api/mcp/auth_callback?code=c0de&state=s" } };
    }
    if (method === "POST" && path === "/oauth/requests/orq_1/deny") {
      return { status: 200, body: { id: "orq_1", state: "denied", agent: "claude", redirect_to: "https://claude.ai/api/mcp/auth_callback?error=access_denied&state=s" } };
    }
    return undefined;
  });
  connect(server.url, "adm1n");
  renderWithClient(<OAuthConsentPage />);
  await screen.findByRole("heading", { name: "Connect Claude?" });
};

describe("the OAuth consent page", () => {
  it("names the site that publishes a client's metadata document, and when it was fetched", async () => {
    await start("https://claude.ai/oauth/mcp-client.json");
    expect(screen.getByText("Published by")).toBeTruthy();
    expect(screen.getByText("https://claude.ai/oauth/mcp-client.json")).toBeTruthy();
    expect(screen.getByText("Fetched")).toBeTruthy();
    expect(screen.queryByText("Registered")).toBeNull();
    expect(screen.queryByText("Client id")).toBeNull();
  });

  it("shows a registered client's id and registration time", async () => {
    await start();
    expect(screen.getByText("Registered")).toBeTruthy();
    expect(screen.getByText("f7c_1")).toBeTruthy();
    expect(screen.queryByText("Published by")).toBeNull();
  });

  it("shows the client, where it sends the browser, the proposed agent and its policies", async () => {
    await start();
    expect(screen.getAllByText("claude.ai").length).toBeGreaterThan(0);
    expect((screen.getByLabelText("Acts as agent") as HTMLInputElement).value).toBe("claude");
    expect(screen.getByText("agents")).toBeTruthy();
    expect(screen.getByText("1 active as this agent")).toBeTruthy();
    expect(screen.getByText(/only this is granted/)).toBeTruthy();
  });

  it("approves as the agent the human typed, with their credential, then goes back to the client", async () => {
    await start();
    fireEvent.change(screen.getByLabelText("Acts as agent"), { target: { value: "claude-ops" } });
    expect(await screen.findByText("none as this agent")).toBeTruthy(); // the page asked again for claude-ops
    fireEvent.click(screen.getByRole("button", { name: "Approve" }));
    await waitFor(() => expect(went).toEqual(["https://claude.ai/api/mcp/auth_callback?code=c0de&state=s"]));
    const posted = server!.requests.find((r) => r.method === "POST")!;
    expect(posted.path).toBe("/oauth/requests/orq_1/approve");
    expect(posted.body).toEqual({ agent: "claude-ops" });
    expect(posted.authorization).toBe("Bearer adm1n");
  });

  it("warns when no policy covers the agent, and refuses an invalid agent id", async () => {
    await start();
    fireEvent.change(screen.getByLabelText("Acts as agent"), { target: { value: "nobody" } });
    expect(await screen.findByText(/every call would be denied/)).toBeTruthy();
    fireEvent.change(screen.getByLabelText("Acts as agent"), { target: { value: "no spaces" } });
    expect((await screen.findByRole("alert")).textContent).toContain("starting with a letter or digit");
    expect((screen.getByRole("button", { name: "Approve" }) as HTMLButtonElement).disabled).toBe(true);
  });

  it("denies, and the client is told access_denied", async () => {
    await start();
    fireEvent.click(screen.getByRole("button", { name: "Deny" }));
    await waitFor(() => expect(went[0]).toContain("error=access_denied"));
    expect(server!.requests.find((r) => r.method === "POST")!.path).toBe("/oauth/requests/orq_1/deny");
  });
});
