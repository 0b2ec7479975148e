import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import type { AgentDetail, CatalogListing } from "../api/governance";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { CatalogPage, GovAgentPage } from "./Catalog";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const entry = (id: string, owner: string, team: string) => ({
  id,
  name: `${id} bot`,
  owner,
  team,
  purpose: "",
  environment: "prod",
  model: "",
  tools: ["list_pets"],
  upstreams: [],
  sub_agents: [],
  data_classes: [],
  autonomy: "supervised",
  lifecycle: "active",
  source_file: "/srv/catalog/agents.yaml",
});

const LISTING: CatalogListing = {
  agents: [
    { ...entry("claude", "alice@example.com", "pets"), state: "active", verdict: "pass", scores: { capability: 30, behaviour: 83, hygiene: 83 } },
    { ...entry("cursor", "bob@example.com", "billing"), state: "suspended", verdict: "warn", scores: { capability: 70, behaviour: 90, hygiene: 70 } },
    { ...entry("batch-*", "", "ops"), state: "proposed", verdict: "", scores: null, covers: ["batch-nightly"] },
  ],
  covered: [{ id: "batch-nightly", entry: "batch-*", state: "proposed", name: "batch-* bot", owner: "", team: "ops", verdict: "fail", scores: { capability: 30, behaviour: 40, hygiene: 55 } }],
  discovered: [{ id: "stranger", discovered: true, flag: "seen in traces, not declared in the catalog", verdict: "fail", scores: { capability: 30, behaviour: 100, hygiene: 55 } }],
  error: "",
};

const agents = () => [...document.querySelectorAll("tbody tr")].map((r) => r.getAttribute("data-agent"));

describe("Catalog page", () => {
  it("lists declared and discovered agents with verdict badges, flags the discovered, and filters", async () => {
    server = await serve(({ path }) => (path === "/governance/catalog" ? { status: 200, body: LISTING } : undefined));
    connect(server.url, "adm");
    window.location.hash = "#/catalog";
    renderWithClient(<CatalogPage />);
    await screen.findByText("Agents (5 of 5)", undefined, { timeout: 5000 });
    // the agent a glob entry covers has its own row, under its entry, with its own verdict
    expect(agents()).toEqual(["claude", "cursor", "batch-*", "batch-nightly", "stranger"]);
    const nightly = document.querySelector('tr[data-agent="batch-nightly"]') as HTMLElement;
    expect(nightly.getAttribute("data-origin")).toBe("covered");
    expect(within(nightly).getByText("fail").className).toBe("badge badge-bad");
    expect(within(nightly).getByRole("link", { name: "batch-nightly" }).getAttribute("href")).toBe("#/catalog/batch-nightly");
    expect(nightly.textContent).toContain("under batch-*");
    const stranger = document.querySelector('tr[data-agent="stranger"]') as HTMLElement;
    expect(stranger.className).toBe("row-flagged");
    expect(within(stranger).getByText("⚑ discovered").getAttribute("title")).toContain("not declared");
    expect(within(stranger).getByText("fail").className).toBe("badge badge-bad");
    expect(within(document.querySelector('tr[data-agent="claude"]') as HTMLElement).getByText("pass").className).toBe("badge badge-ok");
    // the glob entry itself is not "not scored": its agents are
    const glob = document.querySelector('tr[data-agent="batch-*"]') as HTMLElement;
    expect(within(glob).queryByText("not scored")).toBeNull();
    expect(within(glob).getByText("covers 1 agent").getAttribute("data-verdict")).toBe("glob");
    expect(within(stranger).getByRole("link", { name: "stranger" }).getAttribute("href")).toBe("#/catalog/stranger");

    fireEvent.change(screen.getByLabelText("Verdict"), { target: { value: "fail" } });
    await waitFor(() => expect(agents()).toEqual(["batch-nightly", "stranger"]));
    expect(window.location.hash).toBe("#/catalog?verdict=fail");
    fireEvent.change(screen.getByLabelText("Verdict"), { target: { value: "" } });
    fireEvent.change(screen.getByLabelText("Declared"), { target: { value: "declared" } });
    await waitFor(() => expect(agents()).toEqual(["claude", "cursor", "batch-*", "batch-nightly"]));
    fireEvent.change(screen.getByLabelText("Declared"), { target: { value: "covered" } });
    await waitFor(() => expect(agents()).toEqual(["batch-nightly"]));
    fireEvent.change(screen.getByLabelText("Declared"), { target: { value: "declared" } });
    await waitFor(() => expect(agents()).toEqual(["claude", "cursor", "batch-*", "batch-nightly"]));
    fireEvent.change(screen.getByLabelText("Lifecycle"), { target: { value: "suspended" } });
    await waitFor(() => expect(agents()).toEqual(["cursor"]));
    fireEvent.change(screen.getByLabelText("Lifecycle"), { target: { value: "" } });
    fireEvent.change(screen.getByLabelText("Owner or team"), { target: { value: "PETS" } });
    await waitFor(() => expect(agents()).toEqual(["claude"]));
    fireEvent.change(screen.getByLabelText("Owner or team"), { target: { value: "nobody" } });
    await screen.findByText("No agent matches these filters.");
    expect(server.requests.every((r) => r.authorization === "Bearer adm")).toBe(true);
  });

  it("shows a catalog that does not load as an alert above the last good one", async () => {
    server = await serve(({ path }) => (path === "/governance/catalog" ? { status: 200, body: { ...LISTING, error: "agents.yaml: agents[0].lifecycle: unknown state" } } : undefined));
    connect(server.url, "adm");
    window.location.hash = "#/catalog";
    renderWithClient(<CatalogPage />);
    expect((await screen.findByRole("alert")).textContent).toContain("agents[0].lifecycle: unknown state");
  });
});

const DETAIL: AgentDetail = {
  agent: "claude",
  declared: true,
  entry: entry("claude", "alice@example.com", "pets"),
  state: "active",
  lifecycle: [{ from: "proposed", to: "active", at: 1796165784.3, by: "alice", reason: "reviewed" }],
  verdict: "fail",
  findings: [
    { rule: "declared-drift", severity: "info", base_severity: "info", occurrences: 1, message: "used tools it does not declare", remediation: "declare the tools it needs", evidence: ["aa".repeat(16)], first_seen: "2026-12-01T10:00:00Z", last_seen: "2026-12-01T10:00:00Z" },
    { rule: "injection-flagged", severity: "critical", base_severity: "high", occurrences: 4, message: "arguments read like prompt injection", remediation: "read the flagged calls", evidence: ["bb".repeat(16), "cc".repeat(16)], first_seen: "2026-11-28T10:00:00Z", last_seen: "2026-12-01T10:00:00Z" },
    { rule: "no-owner", severity: "medium", base_severity: "medium", occurrences: 1, message: "no owner", remediation: "name an owner", evidence: [], first_seen: "2026-12-01T10:00:00Z", last_seen: "2026-12-01T10:00:00Z" },
  ],
  scores: { capability: 30, behaviour: 40, hygiene: 83 },
  evidence: { behaviour: { calls: 3 } },
  history: [
    { at: "2026-11-30T10:00:00Z", capability: 30, behaviour: 90, hygiene: 83, verdict: "pass" },
    { at: "2026-12-01T10:00:00Z", capability: 30, behaviour: 40, hygiene: 83, verdict: "fail" },
  ],
};

describe("Agent governance detail", () => {
  it("shows metadata, scores over time, findings severest first with trace links and fixes, and moves the lifecycle", async () => {
    let state = "active";
    const posted: unknown[] = [];
    server = await serve(({ method, path, body }) => {
      if (path === "/governance/agents/claude") return { status: 200, body: { ...DETAIL, state, lifecycle: state === "active" ? DETAIL.lifecycle : [...DETAIL.lifecycle, { from: "active", to: "suspended", at: 1796170000, by: "console", reason: "incident 42" }] } };
      if (path === "/governance/catalog/claude/lifecycle" && method === "POST") {
        posted.push(body);
        state = "suspended";
        return { status: 200, body: { id: "claude", from: "active", state: "suspended", at: 1796170000, by: "console", reason: "incident 42" } };
      }
      return undefined;
    });
    connect(server.url, "adm");
    window.location.hash = "#/catalog/claude";
    renderWithClient(<GovAgentPage id="claude" />);
    await screen.findByText("claude bot", undefined, { timeout: 5000 });
    expect(screen.getByText("alice@example.com")).toBeTruthy();
    expect(screen.getAllByText("fail")[0]!.getAttribute("data-verdict")).toBe("fail");

    const chart = screen.getByRole("img", { name: /Scores over time, 2 points/ });
    expect(chart.getAttribute("aria-label")).toContain("Behaviour 90 to 40");
    expect(chart.querySelectorAll('g[data-axis="behaviour"] circle').length).toBe(2);
    expect(chart.querySelector('g[data-axis="behaviour"] polyline')).not.toBeNull();

    const rules = [...document.querySelectorAll("li.finding")].map((li) => li.getAttribute("data-rule"));
    expect(rules).toEqual(["injection-flagged", "no-owner", "declared-drift"]);
    const inj = document.querySelector('li[data-rule="injection-flagged"]') as HTMLElement;
    expect(within(inj).getByText("critical").className).toBe("badge badge-bad");
    expect(within(inj).getByText("escalated from high")).toBeTruthy();
    expect(within(inj).getByText("read the flagged calls")).toBeTruthy();
    const links = within(inj).getAllByRole("link").map((a) => a.getAttribute("href"));
    expect(links).toEqual([`#/traces?trace=${"bb".repeat(16)}`, `#/traces?trace=${"cc".repeat(16)}`]);
    expect(within(document.querySelector('li[data-rule="no-owner"]') as HTMLElement).getByText(/No trace behind it/)).toBeTruthy();
    expect(within(document.querySelector("table.lifecycle-history") as HTMLElement).getByText("reviewed")).toBeTruthy();

    const apply = screen.getByRole("button", { name: "Apply" }) as HTMLButtonElement;
    fireEvent.change(screen.getByLabelText("Move to"), { target: { value: "suspended" } });
    expect(apply.disabled).toBe(true); // a reason is required
    fireEvent.change(screen.getByLabelText("Reason"), { target: { value: "incident 42" } });
    fireEvent.click(apply);
    await screen.findByText("claude: active → suspended.");
    expect(posted).toEqual([{ state: "suspended", reason: "incident 42", by: "console" }]);
    await waitFor(() => expect(within(document.querySelector("table.lifecycle-history") as HTMLElement).getByText("incident 42")).toBeTruthy());
    expect(screen.getByText(/every call of this agent is refused/)).toBeTruthy();
  });

  it("flags an agent that no entry declares and offers no lifecycle move", async () => {
    server = await serve(({ path }) =>
      path === "/governance/agents/stranger" ? { status: 200, body: { ...DETAIL, agent: "stranger", declared: false, entry: null, state: "discovered", lifecycle: [], findings: [] } } : undefined,
    );
    connect(server.url, "adm");
    renderWithClient(<GovAgentPage id="stranger" />);
    expect((await screen.findByRole("note")).textContent).toContain("no catalog entry declares it");
    expect(screen.queryByLabelText("Move to")).toBeNull();
    expect(screen.getByText("No open finding.")).toBeTruthy();
  });

  it("says so when the agent is unknown", async () => {
    server = await serve(({ path }) => (path === "/governance/agents/ghost" ? { status: 404, body: { error: "no agent ghost: neither declared nor scored" } } : undefined));
    connect(server.url, "adm");
    renderWithClient(<GovAgentPage id="ghost" />);
    expect((await screen.findByRole("alert")).textContent).toContain("neither declared nor scored");
  });
});
