import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import type { Diff, Replay } from "../api/governance";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { DiffReplayPage } from "./DiffReplay";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

const DIFF: Diff = {
  kind: "policy",
  name: "agents.yaml",
  from: 1,
  to: 2,
  changes: [
    { class: "neutral", kind: "permission_narrowed_unused", subject: "stranger -> get_boom", detail: "allow (agents) -> deny (agents)", affected_agents: ["stranger"] },
    { class: "expanding", kind: "approval_removed", subject: "claude -> create_pet", detail: "human_approval -> allow", affected_agents: ["claude"] },
    { class: "breaking", kind: "permission_narrowed", subject: "claude -> get_boom", detail: "allow (agents) -> deny (agents)", affected_agents: ["claude"] },
  ],
  summary: { breaking: 1, expanding: 1, neutral: 1 },
  text_diff: '--- agents.yaml (before)\n+++ agents.yaml (after)\n@@ -3,3 +3,3 @@\n rules:\n-  - tools: ["delete_pet"]\n+  - tools: ["delete_pet", "get_boom"]\n     action: deny\n',
};

const REPLAY: Replay = {
  days: 7,
  calls: 40,
  changed: 5,
  transitions: { "deny->allow": 1, "allow->deny": 4 },
  groups: [
    { agent: "cursor", tool: "delete_pet", from: "deny", to: "allow", rule_before: "agents", rule_after: "agents", count: 1, trace_ids: ["dd".repeat(16)] },
    { agent: "claude", tool: "list_pets", from: "deny", to: "allow", rule_before: "agents", rule_after: "agents", count: 1, trace_ids: ["ee".repeat(16)] },
    { agent: "claude", tool: "get_boom", from: "allow", to: "deny", rule_before: "agents", rule_after: "agents", count: 3, trace_ids: ["aa".repeat(16), "bb".repeat(16)] },
  ],
  changes: [],
  elapsed_ms: 1.2,
  draft: "",
  files: ["agents.yaml"],
};

const routes = (replays: unknown[], drafts: unknown[] = []) =>
  serve(({ method, path, query, body }) => {
    if (path === "/governance/versions") return { status: 200, body: query.get("kind") === "policy" ? [{ kind: "policy", name: "agents.yaml", versions: 2, at: 1 }] : [] };
    if (path === "/governance/versions/policy/agents.yaml")
      return { status: 200, body: [1, 2].map((v) => ({ kind: "policy", name: "agents.yaml", version: v, sha256: "x", at: v, by: "", removed: false })) };
    if (path === "/governance/diff") return { status: 200, body: { ...DIFF, from: Number(query.get("old")), to: Number(query.get("new")) } };
    if (path === "/governance/drafts" && method === "GET") return { status: 200, body: drafts };
    if (path === "/policy-files") return { status: 200, body: [{ name: "agents", file: "/srv/policies/agents.yaml" }] };
    if (path === "/policy-files/agents") return { status: 200, body: { name: "agents", text: "name: agents\n" } };
    if (path === "/governance/replay" && method === "POST") {
      replays.push(body);
      const days = (body as { days: number }).days;
      return { status: 200, body: { ...REPLAY, days } };
    }
    if (path.startsWith("/governance/drafts/") && method === "PUT") return { status: 200, body: { name: path.split("/").pop(), files: ["agents.yaml"], policies: 1 } };
    return undefined;
  });

describe("Diff and replay page", () => {
  it("diffs the newest two versions: breaking changes first, the text in two columns", async () => {
    server = await routes([]);
    connect(server.url, "adm");
    window.location.hash = "#/diff?kind=policy&name=agents.yaml";
    renderWithClient(<DiffReplayPage />);
    await screen.findByText("claude -> get_boom", undefined, { timeout: 5000 });
    expect([...document.querySelectorAll(".change-list li")].map((li) => li.getAttribute("data-class"))).toEqual(["breaking", "expanding", "neutral"]);
    expect(server.requests.find((r) => r.path === "/governance/diff")).toBeTruthy();
    const table = screen.getByRole("table", { name: "Text diff, before and after" });
    const changed = table.querySelector("tr.d-change") as HTMLElement;
    expect(changed.querySelector("td.l")!.textContent).toBe('  - tools: ["delete_pet"]');
    expect(changed.querySelector("td.r")!.textContent).toBe('  - tools: ["delete_pet", "get_boom"]');
    expect([...changed.querySelectorAll("td.ln")].map((t) => t.textContent)).toEqual(["4", "4"]);
    expect(within(table).getByText("version 1 (before)")).toBeTruthy();

    fireEvent.change(screen.getByLabelText("From version"), { target: { value: "2" } });
    await waitFor(() => expect(window.location.hash).toContain("old=2"));
  });

  it("replays an edited policy file and groups the changed decisions by agent, narrowing first", async () => {
    const replays: unknown[] = [];
    server = await routes(replays);
    connect(server.url, "adm");
    window.location.hash = "#/diff";
    renderWithClient(<DiffReplayPage />);
    const text = (await screen.findByLabelText("Proposed agents.yaml", undefined, { timeout: 5000 })) as HTMLTextAreaElement;
    await waitFor(() => expect(text.value).toBe("name: agents\n"));
    fireEvent.change(text, { target: { value: "name: agents\nrules: []\n" } });
    fireEvent.change(screen.getByLabelText("Days of traffic"), { target: { value: "0" } });
    expect(screen.getByRole("alert").textContent).toContain("above 0");
    expect((screen.getByRole("button", { name: "Replay" }) as HTMLButtonElement).disabled).toBe(true);
    fireEvent.change(screen.getByLabelText("Days of traffic"), { target: { value: "3" } });
    fireEvent.click(screen.getByRole("button", { name: "Replay" }));
    await screen.findByText((_, el) => el?.getAttribute("role") === "status" && /Replayed 40 calls of the last 3 days/.test(el.textContent ?? ""));
    expect(replays).toEqual([{ files: { "agents.yaml": "name: agents\nrules: []\n" }, days: 3 }]);
    const agents = [...document.querySelectorAll(".replay-agent")].map((a) => a.getAttribute("data-agent"));
    expect(agents).toEqual(["claude", "cursor"]);
    const claude = document.querySelector('.replay-agent[data-agent="claude"]') as HTMLElement;
    expect([...claude.querySelectorAll("tbody tr")].map((r) => r.getAttribute("data-tool"))).toEqual(["get_boom", "list_pets"]);
    expect(within(claude).getAllByRole("link").map((a) => a.getAttribute("href"))).toContain(`#/traces?trace=${"aa".repeat(16)}`);
    const badges = [...document.querySelectorAll(".replay-result .row .badge")].map((b) => b.textContent);
    expect(badges).toEqual(["allow → deny: 4", "deny → allow: 1"]);
  });

  it("saves the edit as a draft and replays the draft by name", async () => {
    const replays: unknown[] = [];
    server = await routes(replays, [{ name: "no-boom", files: { "agents.yaml": "x" }, created_at: "", created_by: "console", applied_at: "" }]);
    connect(server.url, "adm");
    window.location.hash = "#/diff";
    renderWithClient(<DiffReplayPage />);
    const text = (await screen.findByLabelText("Proposed agents.yaml", undefined, { timeout: 5000 })) as HTMLTextAreaElement;
    await waitFor(() => expect(text.value).toBe("name: agents\n"));
    fireEvent.change(screen.getByLabelText("Draft name"), { target: { value: "no-boom" } });
    fireEvent.click(screen.getByRole("button", { name: "Save as draft" }));
    await waitFor(() => expect(window.location.hash).toContain("draft=no-boom"));
    const put = server.requests.find((r) => r.method === "PUT")!;
    expect(put.path).toBe("/governance/drafts/no-boom");
    expect(put.body).toEqual({ files: { "agents.yaml": "name: agents\n" }, by: "console" });
    expect((await screen.findByLabelText("Draft")) as HTMLSelectElement).toBeTruthy();
    await screen.findByRole("button", { name: "Apply draft no-boom" });
    fireEvent.click(screen.getByRole("button", { name: "Replay" }));
    await waitFor(() => expect(replays).toEqual([{ draft: "no-boom", days: 7 }]));
  });
});
