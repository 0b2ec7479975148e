// Drives the console that a running `flux7 serve` serves at /console/, in Debian's Chromium (playwright-core).
// tests/e2e/test_console.py runs one scenario per server and checks the server's side; this script does the
// clicking and reports what it saw as one JSON object on stdout (exit 0), or {ok: false, error} (exit 1).
//
//   node e2e/console.e2e.mjs <scenario> --base http://127.0.0.1:9090 [--token T] [--params '{"k": "v"}']
//
// Scenarios: approve, grant, oauth-consent, halt-stop, halt-resume, memory-search, wrong-token, decision-badges, screenshots,
// gov-catalog, gov-agent, gov-graph, gov-diff-replay (the governance pages, each leaving a screenshot), and the
// record-* scenarios of tests/e2e/test_console_record.py (issue 35, items 9-11).
// Every wait is a condition with a timeout (locator auto-waiting), never a fixed sleep. A page error, a console
// error or a console warning fails the scenario, except the 401s of a tab with no token yet or with the wrong one
// on purpose. `axe(page)` runs axe-core on the page: a serious or critical violation fails the scenario.
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { hideTab, meter } from "../scripts/measure-traffic.mjs";

const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

const ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];
const SHOTS = fileURLToPath(new URL("../screenshots/e2e/", import.meta.url));
const WAIT = 15_000; // generous: CI machines are small and shared

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { base: { type: "string" }, token: { type: "string", default: "" }, params: { type: "string", default: "{}" } },
});
const scenario = positionals[0] ?? "";
const base = (values.base ?? "").replace(/\/+$/, "");
const token = values.token;
const params = JSON.parse(values.params);

/** Problems that fail the scenario whatever it checks: uncaught page errors and console errors. */
const problems = [];
let where = "start";
/** The browser logs every refused request: fine before a token is entered, and in the wrong-token scenario. */
let allow401 = false;
/** Requests the browser itself logs as failed, which a scenario expects (method and path): the console cannot
 *  keep Chromium from logging an error status, only from asking again. */
const expectedFailures = [];
/** How window.confirm is answered. */
let dialogAnswer = true;

function watch(page) {
  page.on("pageerror", (e) => problems.push(`${where}: page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() !== "error" && m.type() !== "warning") return;
    if (allow401 && m.text().includes("status of 401")) return;
    const url = m.location().url ?? "";
    const expected = expectedFailures.findIndex((f) => m.text().includes(`status of ${f.status}`) && url.endsWith(f.path));
    if (expected >= 0) {
      expectedFailures.splice(expected, 1); // once each
      return;
    }
    problems.push(`${where}: console ${m.type()}: ${m.text()} (${url})`);
  });
  // Halts and Forget ask window.confirm first: accepted, unless a scenario says otherwise.
  page.on("dialog", (d) => void (dialogAnswer ? d.accept() : d.dismiss()));
}

/** Opens a console page with a real page load (sessionStorage stays with the tab) and waits until its heading
 *  is there and nothing is still loading. `whenBlank` runs between the two documents, e.g. to await a request. */
async function open(page, route, whenBlank) {
  where = route;
  // A goto that changes only the hash would stay in the same document, with the old page's cached data.
  await page.goto("about:blank");
  const extra = whenBlank?.();
  await page.goto(`${base}/console/${route}`);
  await page.locator("main h1").first().waitFor();
  await waitLoaded(page);
  return extra;
}

async function waitLoaded(page) {
  await page.waitForFunction(() => !document.querySelector("main")?.textContent?.includes("Loading"), null, { timeout: WAIT });
}

/** Enters the token on the Settings page, saves and tests; returns each probe's line. From then on a 401 is
 *  an error unless `refusedOk` (a wrong token on purpose). */
async function connect(page, adminToken, refusedOk = false) {
  // A fresh tab has no token yet, so its first requests are refused.
  allow401 = true;
  await open(page, "#/settings");
  await page.getByLabel("Admin token", { exact: true }).fill(adminToken);
  await page.getByRole("button", { name: "Save and test" }).click();
  // The last probe (the supervisor, not configured here) lands once all the others have.
  await page.locator(".probe-list li", { hasText: "Supervisor" }).waitFor();
  allow401 = refusedOk;
  return page.locator(".probe-list li").allInnerTexts();
}

function expectProbesOk(probes) {
  const bad = probes.filter((p) => !p.includes(": ok") && !p.includes("not configured"));
  if (bad.length) throw new Error(`Save and test failed: ${bad.join("; ")}`);
}

/** The pages the screenshots scenario takes when it is given none: those that need no id. */
const DEFAULT_PAGES = Object.fromEntries(
  [
    ...["", "approvals", "approvals?tab=history", "approvals?tab=precedents", "approvals?tab=settings", "decisions", "agents"],
    ...["traces", "sessions", "otel", "policies", "policies?tab=tool", "tools", "grants", "memory"],
    ...["memory?tab=decisions", "supervisor", "halts", "settings"],
  ].map((r) => [r.replace(/\W+/g, "-") || "overview", `#/${r}`]),
);

/** A full-page screenshot into screenshots/e2e/ (kept as a CI artifact); returns its path. */
async function shot(page, name) {
  await mkdir(SHOTS, { recursive: true });
  const file = join(SHOTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/** axe-core's serious and critical violations on the page as it is now (WCAG 2.x A and AA rules and axe's best
 *  practices), each as "rule: target (summary)"; an empty list passes. */
async function axe(page) {
  if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.addScriptTag({ content: await readFile(AXE, "utf8") });
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(" ")} (${n.failureSummary?.split("\n").slice(1).join(" ").trim()})`));
  });
  return violations;
}

/** Runs axe on the page; its serious and critical violations fail the scenario, named by page. */
async function accessible(page, name) {
  for (const v of await axe(page)) problems.push(`${name}: axe: ${v}`);
}

/** What `main` shows, with the contents of its text boxes (innerText leaves those out). */
const mainText = (page) =>
  page.locator("main").evaluate((m) => [m.innerText, ...[...m.querySelectorAll("textarea")].map((t) => t.value)].join("\n"));

// ---- scenarios --------------------------------------------------------------------------------------

const SCENARIOS = {
  /** The pending call shows on Approvals → Pending; approve it with a reasoning; History then shows it. */
  async approve(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/approvals");
    const row = page.locator("tbody tr", { hasText: params.tool });
    await row.waitFor();
    const prefix = (await row.locator("a.mono").first().innerText()).trim();
    await row.getByPlaceholder("reasoning (optional)").fill(params.reasoning);
    await row.getByRole("button", { name: "Approve" }).click();
    // Resolved, it leaves the pending list (the list is refetched at once, not at the next poll).
    await row.waitFor({ state: "detached" });
    where = "#/approvals?tab=history";
    await page.getByRole("navigation", { name: "Views" }).getByRole("link", { name: "History" }).click();
    const done = page.locator("tbody tr", { hasText: prefix });
    await done.waitFor();
    return { approval_prefix: prefix, history_row: await done.innerText() };
  },

  /** Creates a grant with the Grants form; the list shows it with its id (title) and countdown. */
  async grant(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/grants");
    await page.getByLabel("Agent (glob)").fill(params.agent);
    await page.getByLabel("Tools (glob)").fill(params.tools);
    await page.getByLabel("Duration").fill(params.duration);
    await page.getByRole("button", { name: "Grant", exact: true }).click();
    const status = page.getByRole("status").filter({ hasText: "Granted" });
    await status.waitFor();
    const row = page.locator("tbody tr", { hasText: params.tools });
    await row.waitFor();
    return { status: await status.innerText(), grant_id: await row.locator("td").first().getAttribute("title"), row: await row.innerText() };
  },

  /** An OAuth client waits on the consent page (docs/managed-agents.md): pick the agent id, Approve; the browser
   *  lands on the client's loopback callback with the code. */
  async "oauth-consent"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, `#/oauth/consent?request=${params.request}`);
    const shown = await page.locator("main").innerText();
    await page.getByLabel("Acts as agent").fill(params.agent);
    await page.getByText("none as this agent").waitFor();
    const landed = page.waitForURL((url) => url.href.startsWith(params.callback), { timeout: WAIT });
    await page.getByRole("button", { name: "Approve" }).click();
    await landed;
    return { shown, url: page.url() };
  },

  /** Stops everything from the Emergency stop page; the red banner then sits on every page visited. */
  async "halt-stop"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/halts");
    await page.getByLabel("Everything").check();
    await page.getByLabel("Reason").fill(params.reason);
    await page.getByRole("button", { name: "Stop", exact: true }).click();
    await page.getByRole("status").filter({ hasText: "Stopped." }).waitFor();
    const banners = {};
    for (const route of params.routes) {
      // A real page load each time: the banner comes from that page's own request, not from cached data.
      await open(page, route);
      const banner = page.locator(".halt-banner");
      await banner.waitFor();
      banners[route] = await banner.innerText();
    }
    return { banners };
  },

  /** With a stop in force the banner is there; Resume on the Emergency stop page removes it everywhere. */
  async "halt-resume"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/halts");
    await page.locator(".halt-banner").waitFor();
    const row = page.locator("tbody tr", { hasText: params.reason });
    await row.getByRole("button", { name: "Resume" }).click();
    await row.getByText("resumed").waitFor();
    await page.locator(".halt-banner").waitFor({ state: "detached" });
    const clear = [];
    for (const route of params.routes) {
      // After the page's own GET /halts has answered, no banner may show.
      const answer = await open(page, route, () =>
        page.waitForResponse((r) => new URL(r.url()).pathname === "/halts" && r.request().method() === "GET"),
      );
      if (!answer.ok()) throw new Error(`GET /halts answered ${answer.status()} on ${route}`);
      const body = await answer.json();
      const active = (Array.isArray(body) ? body : body.halts ?? []).filter((h) => h.active !== false && !h.resumed_at);
      if (active.length) throw new Error(`GET /halts still lists ${JSON.stringify(active)} on ${route}`);
      await page.locator(".halt-banner").waitFor({ state: "detached" });
      if (await page.locator(".warn-banner").count()) throw new Error(`${route}: ${await page.locator(".warn-banner").innerText()}`);
      clear.push(route);
    }
    return { clear };
  },

  /** Searches memory from the Search tab; returns the keys and values of the results it lists. */
  async "memory-search"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/memory?tab=search");
    await page.getByLabel("Query").fill(params.query);
    await page.getByRole("button", { name: "Search", exact: true }).click();
    const results = page.locator("ol.results > li");
    await results.first().waitFor();
    const keys = await results.locator("a.mono").allInnerTexts();
    const values = await results.locator("pre.value").allInnerTexts();
    return { keys, values, summary: await page.locator("main p", { hasText: "ranked by relevance" }).innerText() };
  },

  /** A wrong admin token: Save and test says so, and so do the pages (panel and banner); the right one fixes it. */
  async "wrong-token"(page) {
    const probes = await connect(page, params.wrong, true);
    await open(page, "#/traces");
    const panel = page.locator("main .load-error").first();
    await panel.waitFor();
    const banner = page.locator(".warn-banner");
    await banner.waitFor();
    const out = { probes, panel: await panel.innerText(), banner: await banner.innerText() };
    // The same pages with the right token: no refusal left, and the data is there.
    expectProbesOk(await connect(page, token));
    await open(page, "#/traces");
    await page.locator("main .load-error").first().waitFor({ state: "detached" });
    if (await page.locator(".warn-banner").count()) throw new Error("the banner stayed with the right token");
    out.after = await mainText(page);
    return out;
  },

  /** The badge of each approval state where an operator meets it: the Decisions page (params.rows: {name: id}),
   *  the pending approval's page with its precedents, the pending list, and the trace of a timed-out call. */
  async "decision-badges"(page) {
    expectProbesOk(await connect(page, token));
    const badgeOf = async (scope) => {
      const b = scope.locator("[data-decision]").first();
      await b.waitFor();
      return { key: await b.getAttribute("data-decision"), text: (await b.innerText()).trim(), cls: await b.getAttribute("class") };
    };
    await open(page, "#/decisions");
    const rows = {};
    for (const [name, id] of Object.entries(params.rows)) {
      const row = page.locator(`tr[data-approval="${id}"]`);
      await row.waitFor();
      rows[name] = { ...(await badgeOf(row)), row: await row.innerText(), call: await row.locator('td[data-label="Call"] a').getAttribute("href").catch(() => null) };
    }
    // The resolver filter, on the server: only the precedent's decision is left.
    await page.getByLabel("Decided by").selectOption("mem7");
    await page.getByRole("button", { name: "Filter", exact: true }).click();
    await page.getByText("1–1 of 1, newest first.").waitFor();
    const filtered = await page.locator("tbody tr[data-approval]").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-approval")));
    const filteredUrl = await page.evaluate(() => window.location.hash);

    await open(page, `#/approvals/${params.pending}`);
    const status = await badgeOf(page.locator("main dl.facts"));
    const rule = page.locator(".precedent-rule");
    await rule.waitFor();
    const past = await page.locator("table.precedents tbody tr").evaluateAll((trs) =>
      trs.map((tr) => ({
        key: tr.querySelector("[data-decision]")?.getAttribute("data-decision") ?? "",
        call: tr.querySelector('td[data-label="Call"] a')?.getAttribute("href") ?? "",
        approval: tr.querySelector('td[data-label="Approval"] a')?.getAttribute("href") ?? "",
        text: tr.innerText,
      })),
    );
    const detail = { status, rule: await rule.innerText(), past };

    await open(page, "#/approvals");
    const pendingRow = page.locator("tbody tr", { hasText: params.pending.slice(0, 8) });
    const pendingList = await badgeOf(pendingRow);

    await open(page, `#/traces?trace=${params.timeout_trace}`);
    const main = page.locator("main");
    await main.locator('[data-decision="timeout"]').first().waitFor();
    const traceBadges = await main.locator(".badge").evaluateAll((bs) => bs.map((b) => ({ text: b.textContent.trim(), cls: b.className })));
    const decisionLink = await main.locator("a.decision-link").first().getAttribute("href");
    return { rows, filtered, filteredUrl, detail, pendingList, traceBadges, decisionLink };
  },

  /** Catalog: every declared and discovered agent with its verdict badge, the discovered flagged; the filters. */
  async "gov-catalog"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/catalog");
    const rowsOf = () =>
      page.locator("table.catalog-table tbody tr").evaluateAll((trs) =>
        trs.map((tr) => ({
          id: tr.getAttribute("data-agent"),
          verdict: tr.querySelector("[data-verdict]")?.getAttribute("data-verdict"),
          verdictClass: tr.querySelector("[data-verdict]")?.className,
          state: tr.querySelector("[data-state]")?.getAttribute("data-state"),
          flagged: tr.classList.contains("row-flagged") && !!tr.textContent?.includes("discovered"),
          href: tr.querySelector("a")?.getAttribute("href"),
        })),
      );
    await page.locator("table.catalog-table tbody tr").first().waitFor();
    const rows = await rowsOf();
    await shot(page, "gov-catalog");
    await accessible(page, "#/catalog");
    await page.getByLabel("Verdict").selectOption("fail");
    await page.waitForFunction(() => document.querySelectorAll("table.catalog-table tbody tr").length && [...document.querySelectorAll("table.catalog-table tbody tr [data-verdict]")].every((b) => b.getAttribute("data-verdict") === "fail"));
    const failing = await rowsOf();
    await page.getByLabel("Verdict").selectOption("");
    await page.getByLabel("Declared").selectOption("discovered");
    await page.getByRole("heading", { name: /^Agents \(1 of / }).waitFor();
    const discovered = await rowsOf();
    await page.getByLabel("Declared").selectOption("");
    await page.getByLabel("Owner or team").fill("alice");
    await page.getByRole("heading", { name: /^Agents \(1 of / }).waitFor();
    const byOwner = await rowsOf();
    return { rows, failing, discovered, byOwner, url: page.url() };
  },

  /** Agent detail: metadata, scores over time, findings with evidence links that open the trace, then a
   *  lifecycle move from the admin's form. */
  async "gov-agent"(page) {
    expectProbesOk(await connect(page, token));
    const agent = params.agent;
    await open(page, `#/catalog/${encodeURIComponent(agent)}`);
    await page.locator("li.finding").first().waitFor();
    const findings = await page.locator("li.finding").evaluateAll((lis) =>
      lis.map((li) => ({
        rule: li.getAttribute("data-rule"),
        severity: li.querySelector("[data-severity]")?.getAttribute("data-severity"),
        fix: li.textContent?.split("Fix:")[1]?.split("Evidence")[0]?.trim(),
        evidence: [...li.querySelectorAll(".evidence a")].map((a) => a.getAttribute("href")),
      })),
    );
    const chart = await page.getByRole("img", { name: /Scores over time/ }).getAttribute("aria-label");
    const points = await page.locator('.score-chart g[data-axis="behaviour"] circle').count();
    const facts = await page.locator("dl.facts").innerText();
    await shot(page, "gov-agent-detail");
    await accessible(page, `#/catalog/${agent}`);
    // An evidence link opens the existing trace page on that trace.
    const link = page.locator("li.finding .evidence a").first();
    const evidenceHref = await link.getAttribute("href");
    where = evidenceHref;
    await link.click();
    await page.locator("main h1", { hasText: "Traces" }).waitFor();
    await waitLoaded(page);
    const traceId = decodeURIComponent(evidenceHref.split("trace=")[1]);
    await page.locator("main", { hasText: traceId }).waitFor();
    const tracePage = (await mainText(page)).slice(0, 4000);
    // The lifecycle move.
    await open(page, `#/catalog/${encodeURIComponent(agent)}`);
    await page.getByLabel("Move to").selectOption(params.state);
    await page.getByLabel("Reason").fill(params.reason);
    await page.getByRole("button", { name: "Apply" }).click();
    const moved = await page.locator("p.note-ok", { hasText: `→ ${params.state}` }).innerText();
    await page.locator("table.lifecycle-history tbody tr", { hasText: params.reason }).waitFor();
    const history = await page.locator("table.lifecycle-history tbody tr").allInnerTexts();
    const stateNow = await page.locator("#main [data-state]").first().getAttribute("data-state");
    return { findings, chart, points, facts, evidenceHref, tracePage, moved, history, stateNow };
  },

  /** Graph: drawn by cytoscape on a canvas; zoom by buttons and by the wheel; filter a node kind; select a
   *  node to read its impact. */
  async "gov-graph"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/graph");
    const canvasBox = page.getByTestId("graph-canvas");
    await canvasBox.locator("canvas").first().waitFor();
    const zoomOf = async () => Number(await page.locator("[data-zoom]").getAttribute("data-zoom"));
    const zoom0 = await zoomOf();
    await page.getByRole("button", { name: "Zoom in" }).click();
    await page.waitForFunction((z) => Number(document.querySelector("[data-zoom]")?.getAttribute("data-zoom")) > z, zoom0);
    const zoomIn = await zoomOf();
    const box = await canvasBox.boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.wheel(0, 400);
    await page.waitForFunction((z) => Number(document.querySelector("[data-zoom]")?.getAttribute("data-zoom")) < z, zoomIn);
    const zoomWheel = await zoomOf();
    await page.getByRole("button", { name: "Fit" }).click();
    // A real click on the canvas, where the library drew the node (its position read from the instance the
    // library registers on its container): the page selects it and asks for its impact.
    const at = await canvasBox.evaluate((el, id) => el._cyreg.cy.getElementById(id).renderedPosition(), params.canvasNode);
    const frame = await canvasBox.boundingBox();
    await page.mouse.click(frame.x + at.x, frame.y + at.y);
    await page.locator("#impact", { hasText: params.canvasNode }).waitFor();
    await page.locator(".impact").waitFor();
    const canvasImpact = { url: page.url(), calls: Number(await page.locator(".impact").getAttribute("data-calls")), text: await page.locator(".impact").innerText() };
    const counts = async () => (await page.locator("main h2").first().innerText()).trim();
    const all = await counts();
    const canvases = await canvasBox.locator("canvas").count();
    await page.getByLabel("Tools", { exact: true }).uncheck();
    await page.waitForFunction((before) => document.querySelector("main h2")?.textContent?.trim() !== before, all);
    const withoutTools = await counts();
    const listedWithoutTools = await page.locator(".node-list li button").allInnerTexts();
    await page.getByLabel("Tools", { exact: true }).check();
    await page.locator("main h2", { hasText: all }).waitFor();
    await page.locator(".node-list").getByRole("button", { name: params.node, exact: true }).click();
    const impact = page.locator(".impact");
    await impact.waitFor();
    const impactText = await impact.innerText();
    const impactCalls = Number(await impact.getAttribute("data-calls"));
    const impactSessions = Number(await impact.getAttribute("data-sessions"));
    await shot(page, "gov-graph");
    await accessible(page, "#/graph");
    return { zoom0, zoomIn, zoomWheel, canvasImpact, all, canvases, withoutTools, listedWithoutTools, impactText, impactCalls, impactSessions, url: page.url() };
  },

  /** Replay an edited policy file, save it as a draft, apply the draft; then the diff of the policy file:
   *  breaking changes first and the text side by side. */
  async "gov-diff-replay"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/diff");
    const text = page.getByLabel(`Proposed ${params.file}.yaml`);
    await page.waitForFunction(() => (document.querySelector("#r-text")?.value ?? "").length > 0);
    await text.fill(params.proposed);
    await page.getByLabel("Days of traffic").fill("1");
    await page.getByRole("button", { name: "Replay" }).click();
    const status = await page.locator(".replay-result [role=status]").innerText();
    const groups = await page.locator(".replay-agent").evaluateAll((divs) =>
      divs.map((d) => ({
        agent: d.getAttribute("data-agent"),
        rows: [...d.querySelectorAll("tbody tr")].map((tr) => ({ tool: tr.getAttribute("data-tool"), text: tr.textContent })),
      })),
    );
    await shot(page, "gov-replay");
    await page.getByLabel("Draft name").fill(params.draft);
    await page.getByRole("button", { name: "Save as draft" }).click();
    await page.getByRole("button", { name: `Apply draft ${params.draft}` }).click(); // window.confirm is accepted
    const applied = await page.locator("p.note-ok", { hasText: "Applied" }).innerText();
    // The diff pane turns to the applied file by itself: nothing is chosen here.
    await page.locator(".change-list li").first().waitFor();
    const diffName = await page.getByLabel("Name", { exact: true }).inputValue();
    const diffUrl = page.url();
    const classes = await page.locator(".change-list li").evaluateAll((lis) => lis.map((li) => ({ cls: li.getAttribute("data-class"), text: li.textContent })));
    const changedLines = await page.locator("table.diff2 tr.d-change").evaluateAll((trs) =>
      trs.map((tr) => ({ before: tr.querySelector("td.l")?.textContent, after: tr.querySelector("td.r")?.textContent })),
    );
    const sideBySide = await page.locator(".side-by-side > .card").evaluateAll((cards) => cards.map((c) => Math.round(c.getBoundingClientRect().top)));
    await shot(page, "gov-diff-replay");
    await accessible(page, "#/diff");
    return { status, groups, applied, diffName, diffUrl, classes, changedLines, sideBySide, url: page.url() };
  },

  // ---- issue 35, items 9-11: tests/e2e/test_console_record.py --------------------------------------------

  /** The Catalog with a glob entry: the agents it covers have rows of their own, with their verdicts. */
  async "record-catalog"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/catalog");
    await page.locator("table.catalog-table tbody tr").first().waitFor();
    const rows = await page.locator("table.catalog-table tbody tr").evaluateAll((trs) =>
      trs.map((tr) => ({
        id: tr.getAttribute("data-agent"),
        origin: tr.getAttribute("data-origin"),
        verdict: tr.querySelector("[data-verdict]")?.getAttribute("data-verdict"),
        badge: tr.querySelector("[data-verdict]")?.textContent?.trim(),
        text: tr.innerText,
      })),
    );
    await shot(page, "record-catalog");
    await accessible(page, "#/catalog");
    return { rows };
  },

  /** The Overview without a token says it cannot see the pending approvals, and the dot is not green; with the
   *  token the same page counts them. */
  async "record-no-token"(page) {
    allow401 = true;
    await open(page, "#/");
    const kpi = page.locator("a.kpi", { hasText: "pending" });
    await kpi.filter({ hasText: "cannot see" }).waitFor();
    const conn = page.locator("a.conn");
    await page.locator('a.conn[data-conn="warn"]').waitFor();
    const before = {
      kpi: await kpi.innerText(),
      kpiHref: await kpi.getAttribute("href"),
      conn: await conn.getAttribute("data-conn"),
      connText: await conn.innerText(),
      connHref: await conn.getAttribute("href"),
      pending: await page.locator("section.card", { hasText: "Pending approvals" }).innerText(),
    };
    await shot(page, "record-no-token");
    await accessible(page, "#/ (no token)");
    expectProbesOk(await connect(page, token));
    await open(page, "#/");
    await page.locator("a.kpi", { hasText: "pending now" }).waitFor();
    await page.locator('a.conn[data-conn="ok"]').waitFor();
    const after = { kpi: await page.locator("a.kpi", { hasText: "pending now" }).innerText(), conn: await conn.getAttribute("data-conn") };
    return { before, after };
  },

  /** An approval's precedents: the summary counts the refusal its rows show. */
  async "record-precedents"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, `#/approvals/${params.approval}`);
    const rule = page.locator(".precedent-rule");
    await rule.waitFor();
    await page.locator("table.precedents tbody tr").first().waitFor();
    const rows = await page.locator("table.precedents tbody tr").evaluateAll((trs) =>
      trs.map((tr) => ({ key: tr.querySelector("[data-decision]")?.getAttribute("data-decision") ?? "", counts: tr.querySelector('td[data-label="Counts?"]')?.textContent ?? "" })),
    );
    return { rule: await rule.innerText(), refusals: Number(await rule.locator("[data-refusals]").getAttribute("data-refusals")), rows };
  },

  /** Emergency-stop history: who resumed a stop and when; grants held only on a stop still in force. */
  async "record-halts"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/halts");
    await page.locator("table tbody tr").first().waitFor();
    const rows = await page.locator("main table tbody tr").evaluateAll((trs) =>
      trs.map((tr) => ({
        state: tr.querySelector("[data-halt-state]")?.getAttribute("data-halt-state"),
        stateText: tr.querySelector('td[data-label="State"]')?.innerText ?? "",
        scope: tr.querySelector('td[data-label="Scope"]')?.innerText ?? "",
      })),
    );
    await accessible(page, "#/halts");
    return { rows };
  },

  /** Failed calls: the outcome beside the policy's "allow", on the Traces page and the Overview. */
  async "record-traces"(page) {
    expectProbesOk(await connect(page, token));
    const outcome = async (route) => {
      await open(page, route);
      await page.locator("main tbody tr").first().waitFor();
      return page.locator('main tbody tr td[data-label="Outcome"]').first().evaluate((td) => [...td.querySelectorAll(".badge")].map((b) => ({ text: b.textContent.trim(), cls: b.className, title: b.getAttribute("title") ?? "" })));
    };
    const upstream = await outcome(`#/traces?tool=${params.upstreamTool}`);
    const args = await outcome(`#/traces?tool=${params.argsTool}&agent=${params.argsAgent}`);
    const ok = await outcome(`#/traces?tool=list_pets`);
    await accessible(page, "#/traces");
    return { upstream, args, ok };
  },

  /** The graph with fifteen tools: no label runs into another (boxes from cytoscape's own measures). */
  async "record-graph"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/graph");
    const canvasBox = page.getByTestId("graph-canvas");
    await canvasBox.locator("canvas").first().waitFor();
    await page.waitForFunction(() => document.querySelector('[data-testid="graph-canvas"]')?._cyreg?.cy?.nodes().length > 0);
    const nodes = await canvasBox.evaluate((el) =>
      el._cyreg.cy.nodes().map((n) => {
        const b = n.renderedBoundingBox({ includeNodes: true, includeLabels: true, includeEdges: false, includeOverlays: false });
        return { id: n.id(), type: n.data("type"), box: { x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2 } };
      }),
    );
    const overlaps = [];
    for (let i = 0; i < nodes.length; i++)
      for (let j = i + 1; j < nodes.length; j++) {
        const a = nodes[i].box;
        const b = nodes[j].box;
        if (a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2) overlaps.push(`${nodes[i].id} × ${nodes[j].id}`);
      }
    await shot(page, "record-graph");
    await accessible(page, "#/graph");
    return { tools: nodes.filter((n) => n.type === "tool").length, agents: nodes.filter((n) => n.type === "agent").map((n) => n.id), overlaps };
  },

  /** Memory on a phone (390 px): tags wrap without overlapping, epoch tags read as times, and the decision
   *  facts are hidden until asked for. */
  async "record-memory"(page) {
    await page.setViewportSize({ width: 390, height: 844 });
    expectProbesOk(await connect(page, token));
    await open(page, "#/memory");
    await page.locator("main table tbody tr").first().waitFor();
    const layout = () =>
      page.evaluate(() => {
        const width = document.documentElement.clientWidth;
        const clashes = [];
        const outside = [];
        for (const tr of document.querySelectorAll("main table tbody tr")) {
          const tags = [...tr.querySelectorAll(".tag")].map((t) => ({ text: t.textContent, r: t.getBoundingClientRect() }));
          for (let i = 0; i < tags.length; i++) {
            const a = tags[i].r;
            if (a.right > width + 0.5) outside.push(tags[i].text);
            for (let j = i + 1; j < tags.length; j++) {
              const b = tags[j].r;
              if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) clashes.push(`${tags[i].text} × ${tags[j].text}`);
            }
          }
        }
        return { clashes, outside, scrollsSideways: document.documentElement.scrollWidth > width };
      });
    const keys = () => page.locator('main table tbody td[data-label="Key"] a').allInnerTexts();
    const hidden = { keys: await keys(), note: await page.locator("p[data-system-hidden]").innerText(), count: Number(await page.locator("p[data-system-hidden]").getAttribute("data-system-hidden")) };
    await page.getByLabel("Show decision facts").check();
    await page.locator('main table tbody td[data-label="Key"] a', { hasText: "decision." }).first().waitFor();
    const shown = { keys: await keys(), layout: await layout(), text: await mainText(page) };
    await shot(page, "record-memory-390");
    await accessible(page, "#/memory?system=1 (390 px)");
    return { hidden, shown };
  },

  /** The forms: Enter in a pending approval's reasoning approves it; a malformed glob and a bad grant duration
   *  say what is wrong; a policy the server refuses has the line its fault names marked. */
  async "record-forms"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/approvals");
    const row = page.locator("tbody tr", { hasText: params.approval.slice(0, 8) });
    await row.getByPlaceholder("reasoning (optional)").fill(params.reasoning);
    await row.getByPlaceholder("reasoning (optional)").press("Enter");
    await row.waitFor({ state: "detached" });

    await open(page, `#/decisions?agent=${encodeURIComponent(params.badGlob)}`);
    const globAlert = page.locator("main [role=alert]", { hasText: "not a valid glob" }).first();
    await globAlert.waitFor();
    const glob = { alert: await globAlert.innerText(), noMatch: await page.getByText("No decision matches these filters.").count() };

    await open(page, "#/grants");
    await page.getByLabel("Agent (glob)").fill("claude");
    await page.getByLabel("Tools (glob)").fill("list_pets");
    await page.getByLabel("Duration").fill(params.badDuration);
    const durationMsg = page.locator("#g-duration-problem");
    await durationMsg.waitFor();
    const grant = { message: await durationMsg.innerText(), disabled: await page.getByRole("button", { name: "Grant", exact: true }).isDisabled(), invalid: await page.getByLabel("Duration").getAttribute("aria-invalid") };
    await accessible(page, "#/grants (bad duration)");

    await open(page, `#/policies?tab=yaml&file=${params.file}`);
    await page.waitForFunction(() => (document.querySelector("#yaml")?.value ?? "").length > 0);
    await page.locator("#yaml").fill(params.badPolicy);
    expectedFailures.push({ status: 400, path: `/policy-files/${params.file}` }); // the refusal this step is about
    await page.getByRole("button", { name: "Save and reload" }).click();
    const marked = page.locator(".gutter .gutter-fault");
    await marked.waitFor();
    const policy = { marked: Number(await marked.innerText()), note: await page.locator("main [role=alert]", { hasText: "Not saved" }).innerText(), lineButton: await page.locator("[data-fault-line]").getAttribute("data-fault-line") };
    await page.locator("[data-fault-line]").click();
    policy.selected = await page.locator("#yaml").evaluate((el) => el.value.slice(el.selectionStart, el.selectionEnd));
    await accessible(page, "#/policies (fault)");
    return { glob, grant, policy };
  },

  /** Forget, on the precedents and on a memory entry: an outlined danger button, asking first. */
  async "record-forget"(page) {
    expectProbesOk(await connect(page, token));
    await open(page, "#/approvals?tab=precedents");
    const row = page.locator("tbody tr", { hasText: params.tool });
    await row.waitFor();
    const button = row.getByRole("button", { name: "Forget" });
    const look = (b) => b.evaluate((el) => ({ cls: el.className, bg: getComputedStyle(el).backgroundColor, color: getComputedStyle(el).color }));
    const primary = await page.evaluate(() => {
      const b = document.createElement("button");
      b.className = "btn";
      document.body.append(b);
      const bg = getComputedStyle(b).backgroundColor;
      b.remove();
      return bg;
    });
    const precedents = { ...(await look(button)), primary };
    // Dismissed, nothing is forgotten; accepted, it is.
    dialogAnswer = false;
    const asked = new Promise((resolve) => page.once("dialog", (d) => resolve(d.message())));
    await button.click();
    precedents.question = await asked;
    dialogAnswer = true;
    precedents.afterDismiss = await row.count();
    await button.click();
    await page.getByRole("status").filter({ hasText: "Forgotten." }).waitFor();
    await open(page, `#/memory?key=${encodeURIComponent(params.memoryKey)}`);
    const memory = await look(page.getByRole("button", { name: "Forget" }));
    return { precedents, memory };
  },

  /** Tools with pinning off: "not configured", quietly; the tab does not ask again on the next visit. */
  async "record-pins"(page) {
    expectProbesOk(await connect(page, token));
    const asked = [];
    page.on("request", (r) => new URL(r.url()).pathname === "/tools/pins" && asked.push(r.url()));
    expectedFailures.push({ status: 501, path: "/tools/pins" }); // Chromium's own log line of the one 501
    await open(page, "#/tools");
    const note = page.locator("[data-pins=not-configured]");
    await note.waitFor();
    const first = { note: await note.innerText(), errors: await page.locator("main .load-error").count() };
    await open(page, "#/grants");
    await open(page, "#/tools");
    await note.waitFor();
    return { first, asked: asked.length, leftExpected: expectedFailures.length };
  },

  /** What the console costs the network (scripts/measure-traffic.mjs measures it for an hour's figures): the
   *  first load compressed, the second from the cache, the polls of an idle visible Overview answered 304, and
   *  nothing at all from a hidden one (while another, visible tab polls: the clock of the wait). */
  async "record-traffic"(page) {
    const m = await meter(page);
    const assets = [];
    page.on("response", (r) => {
      if (new URL(r.url()).pathname.startsWith("/console/assets/")) assets.push({ path: new URL(r.url()).pathname, status: r.status(), encoding: r.headers()["content-encoding"] ?? "", cache: r.headers()["cache-control"] ?? "" });
    });
    await page.goto(`${base}/console/#token=${encodeURIComponent(token)}`);
    await page.waitForFunction(() => !location.hash.includes("token="));
    await page.locator("main h1").first().waitFor();
    await waitLoaded(page);
    await page.waitForLoadState("networkidle");
    const firstLoad = m.take();
    const firstAssets = assets.splice(0);
    await page.reload();
    await page.locator("main h1").first().waitFor();
    await waitLoaded(page);
    await page.waitForLoadState("networkidle");
    const secondLoad = m.take(); // cached assets cost no bytes on the wire
    const apiStatus = [];
    page.on("response", (r) => !new URL(r.url()).pathname.startsWith("/console") && apiStatus.push(r.status()));
    const polls = (p, n) => {
      let seen = 0;
      return p.waitForResponse((r) => new URL(r.url()).pathname === "/approvals" && ++seen >= n, { timeout: 30_000 });
    };
    await polls(page, 4);
    const visible = { ...m.take(), statuses: apiStatus.splice(0) };
    await hideTab(page, true);
    await m.settled(); // a poll sent just before the tab hid is the visible tab's
    m.take();
    const clock = await page.context().newPage();
    await clock.goto(`${base}/console/#token=${encodeURIComponent(token)}`);
    await polls(clock, 4); // ~9 s of another tab's polls: the hidden one had three poll intervals of its own
    const hidden = m.take();
    await hideTab(page, false);
    await page.waitForResponse((r) => new URL(r.url()).pathname === "/traces"); // visible again: it catches up at once
    await clock.close();
    return { firstLoad, firstAssets, secondLoad, visible, hidden };
  },

  /** Every page, full size, into screenshots/e2e/; each must load with no error shown or logged.
   *  params.pages is {name: route}; by default the pages that need no id. */
  async screenshots(page) {
    await mkdir(SHOTS, { recursive: true });
    expectProbesOk(await connect(page, token));
    const shots = {};
    for (const [name, route] of Object.entries(params.pages ?? DEFAULT_PAGES)) {
      const before = problems.length;
      await open(page, route);
      const errors = await page.locator("main .load-error").allInnerTexts();
      for (const e of errors) problems.push(`${name}: ${e}`);
      const file = join(SHOTS, `${name}.png`);
      await page.screenshot({ path: file, fullPage: true });
      const text = (await mainText(page)).slice(0, 20_000);
      // Accessibility in both themes: the colours differ, so does their contrast.
      const axeLight = await axe(page);
      await page.emulateMedia({ colorScheme: "dark" });
      const axeDark = await axe(page);
      await page.emulateMedia({ colorScheme: "light" });
      for (const v of axeLight) problems.push(`${name} (light): axe: ${v}`);
      for (const v of axeDark) problems.push(`${name} (dark): axe: ${v}`);
      shots[name] = { file, route, text, errors: problems.length - before, axe: [...axeLight, ...axeDark] };
    }
    return { shots };
  },
};

async function main() {
  const run = SCENARIOS[scenario];
  if (!run || !base) {
    throw new Error(`usage: node e2e/console.e2e.mjs <${Object.keys(SCENARIOS).join("|")}> --base URL [--token T] [--params JSON]`);
  }
  const profile = await mkdtemp(join(tmpdir(), "flux7-e2e-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 860 },
  });
  try {
    context.setDefaultTimeout(WAIT);
    const page = context.pages()[0] ?? (await context.newPage());
    watch(page);
    let result;
    try {
      result = await run(page);
    } catch (e) {
      // A picture of the moment it failed, next to the other screenshots.
      await mkdir(SHOTS, { recursive: true });
      await page.screenshot({ path: join(SHOTS, `failed-${scenario}.png`), fullPage: true }).catch(() => {});
      throw new Error(`${where}: ${e.message}`);
    }
    if (problems.length) throw new Error(problems.join("\n"));
    return result;
  } finally {
    await context.close();
    await rm(profile, { recursive: true, force: true });
  }
}

try {
  const result = await main();
  process.stdout.write(JSON.stringify({ ok: true, scenario, ...result }) + "\n");
} catch (e) {
  process.stdout.write(JSON.stringify({ ok: false, scenario, error: e.message, problems }) + "\n");
  process.exitCode = 1;
}
