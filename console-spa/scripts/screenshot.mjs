// Opens the built console (dist/) against the fixture server and screenshots each page into screenshots/.
// Needs Debian's Chromium: apt-get install -y chromium. Usage: npm run build && node scripts/screenshot.mjs
// Against a running flux7 instead: node scripts/screenshot.mjs --base http://127.0.0.1:9090 [--token T]
// (the console it serves at /console; pages are checked for load errors instead of fixture text).
import { mkdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { ADMIN_TOKEN, start } from "./fixture-server.mjs";

const OUT = fileURLToPath(new URL("../screenshots/", import.meta.url));
const ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];

// [file name, hash route, text that must be on the page once it has loaded]
const PAGES = [
  ["overview", "#/", "Pending approvals"],
  ["approvals", "#/approvals", "injection risk"],
  ["approval-detail", "#/approvals/(set below)", "Injection risk."],
  ["approvals-history", "#/approvals?tab=history", "system:timeout"],
  ["approvals-precedents", "#/approvals?tab=precedents", "github.list_issues"],
  ["approvals-settings", "#/approvals?tab=settings", "Human approvals needed"],
  ["decisions", "#/decisions", "refused: timed out"],
  ["agents", "#/agents", "Observed rights"],
  ["agent-detail", "#/agents/claude", "Effective rights"],
  ["traces", "#/traces", "The trace chain holds"],
  ["trace-why", `#/traces?trace=${"x"}`, "Why"],
  ["sessions", "#/sessions", "Sessions, most recently"],
  ["otel", "#/otel", "Spans by trace"],
  ["policies", "#/policies", "claude-policy"],
  ["policies-by-tool", "#/policies?tab=tool", "Which rule"],
  ["policies-yaml", "#/policies?tab=yaml&file=claude", "human_approval"],
  ["catalog", "#/catalog", "discovered (not declared)"],
  ["catalog-agent", "#/catalog/claude", "behaviour-low"],
  ["graph", "#/graph?node=tool%3Agithub.create_issue", "46 calls"],
  ["diff-replay", "#/diff?kind=policy&name=claude-policy.yaml", "claude -> github.create_issue"],
  ["tools", "#/tools", "MCP servers"],
  ["grants", "#/grants", "feedbeef"],
  ["memory", "#/memory", "project.conventions"],
  ["memory-search", "#/memory?tab=search&q=conventions", "results (ranked by relevance)"],
  ["memory-decisions", "#/memory?tab=decisions", "github.create_issue"],
  ["memory-entry", "#/memory?key=project.conventions", "History"],
  ["supervisor", "#/supervisor", "ollama"],
  ["halts", "#/halts", "runaway loop"],
  ["settings", "#/settings", "Connection"],
];

const PHONE = new Set(["overview", "approvals", "approval-detail", "traces", "otel", "agent-detail", "policies-yaml", "catalog", "catalog-agent", "graph", "diff-replay"]);

function arg(name) {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
}

async function main() {
  await mkdir(OUT, { recursive: true });
  const real = arg("--base");
  const server = real ? null : await start(0);
  const base = real ? real.replace(/\/+$/, "") : `http://127.0.0.1:${server.address().port}`;
  const token = real ? arg("--token") ?? "" : ADMIN_TOKEN;
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ARGS });
  const problems = [];
  const shoot = async (name, route, expect, opts = {}) => {
    const context = await browser.newContext({
      viewport: opts.viewport ?? { width: 1280, height: 860 },
      colorScheme: opts.dark ? "dark" : "light",
      deviceScaleFactor: 1,
    });
    const settings = { baseUrl: "", adminToken: opts.token ?? token, memoryToken: "", supervisorUrl: opts.noSup || real ? "" : `${base}/sup7`, supervisorToken: "sup7-token" };
    await context.addInitScript((s) => sessionStorage.setItem("flux7.console.connection", JSON.stringify(s)), settings);
    const page = await context.newPage();
        // A refused token is the point of the "unauthorized" shot; the browser logs each 401 it gets.
    page.on("console", (m) => {
      if (m.type() !== "error") return;
      if (opts.token && m.text().includes("401")) return;
      // Against a real server, API failures are judged by what the page shows (.load-error), not the log.
      // Before "/console" redirects itself, the browser's preloader already asks for /assets/… (harmless).
      if ((real || opts.url) && m.text().startsWith("Failed to load resource")) return;
      problems.push(`${name}: console error: ${m.text()}`);
    });
    page.on("pageerror", (e) => problems.push(`${name}: page error: ${e.message}`));
    await page.goto(opts.url ?? `${base}/console/${route}`);
    try {
      if (real) {
        await page.locator("main h1").first().waitFor({ timeout: 8000 });
        await page.waitForFunction(() => !document.querySelector("main")?.textContent?.includes("Loading"), null, { timeout: 8000 });
        for (const text of await page.locator("main .load-error").allTextContents()) problems.push(`${name}: ${text}`);
      } else {
        await page.getByText(expect, { exact: false }).first().waitFor({ timeout: 8000 });
      }
    } catch {
      problems.push(`${name}: ${real ? "still loading after 8 s" : `"${expect}" never appeared`}`);
    }
    // A page wider than the viewport means something escaped its scroll container.
    const [scrollW, clientW] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    if (scrollW > clientW + 1) problems.push(`${name}: page is ${scrollW}px wide in a ${clientW}px viewport`);
    await page.screenshot({ path: `${OUT}${name}.png`, fullPage: !opts.viewport });
    await context.close();
  };
  const traces = await fetch(`${base}/traces?limit=3`, { headers: token ? { Authorization: `Bearer ${token}` } : {} }).then((r) => r.json());
  const traceId = traces.at(-1)?.trace_id ?? "";
  const pending = await fetch(`${base}/approvals?status=pending`, { headers: token ? { Authorization: `Bearer ${token}` } : {} }).then((r) => r.json());
  const approvalId = real ? pending[0]?.id ?? "none" : "9f8e7d6c5b4a3921";
  for (const [name, route, expect] of PAGES) {
    if (name === "approval-detail" && approvalId === "none") continue;
    const r = name === "trace-why" ? `#/traces?trace=${traceId}` : name === "approval-detail" ? `#/approvals/${approvalId}` : route;
    await shoot(name, r, expect);
    if (PHONE.has(name)) await shoot(`${name}-phone`, r, expect, { viewport: { width: 390, height: 844 } });
  }
  // "/console" without its slash must still load the relative ./assets/ (index.html redirects).
  await shoot("no-trailing-slash", "", "Overview", { url: `${base}/console#/` });
  await shoot("overview-dark", "#/", "Pending approvals", { dark: true });
  await shoot("policies-yaml-dark", "#/policies?tab=yaml&file=claude", "human_approval", { dark: true });
  if (!real) {
    await shoot("unauthorized", "#/traces", "refused the admin token", { token: "wrong" });
    await shoot("supervisor-unset", "#/supervisor", "Not configured", { noSup: true });
  }
  await browser.close();
  server?.close();
  if (problems.length) {
    console.error(problems.join("\n"));
    process.exitCode = 1;
  }
  console.log(`screenshots in ${OUT}`);
}

await main();
