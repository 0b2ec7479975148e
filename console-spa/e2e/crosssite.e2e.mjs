// A web page on another origin tries to drive a running `flux7 serve` through the browser (issue 13, item 2),
// and the start-up line's console link signs the console in. tests/e2e/test_cross_site.py serves the page,
// runs this script in Debian's Chromium (playwright-core) and checks the server's side; this script reports
// what the browser did as one JSON object on stdout (exit 0), or {ok: false, error} (exit 1).
//
//   node e2e/crosssite.e2e.mjs attack --page http://localhost:8123/attack.html
//   node e2e/crosssite.e2e.mjs console-link --page 'http://127.0.0.1:9090/console/#token=…'
//
// attack: the page itself (written by the test) fires its requests on load and sets window.__attack to what
// each fetch did. Every wait is a condition with a timeout, never a fixed sleep.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];
const WAIT = 20_000;

const { positionals, values } = parseArgs({ allowPositionals: true, options: { page: { type: "string" } } });
const scenario = positionals[0] ?? "";
const target = values.page ?? "";

const SCENARIOS = {
  async attack(page) {
    await page.goto(target);
    await page.waitForFunction(() => Array.isArray(window.__attack), null, { timeout: WAIT });
    return { origin: await page.evaluate(() => location.origin), fetches: await page.evaluate(() => window.__attack) };
  },

  /** Opens the start-up link; the console keeps the token, clears the fragment and loads Grants without a 401. */
  async "console-link"(page) {
    const refused = [];
    page.on("response", (r) => {
      if (r.status() === 401) refused.push(r.url());
    });
    await page.goto(target);
    await page.locator("main h1").first().waitFor({ timeout: WAIT });
    const afterLoad = await page.evaluate(() => location.href);
    await page.evaluate(() => {
      location.hash = "#/grants";
    });
    await page.locator("main h1", { hasText: "Grants" }).waitFor({ timeout: WAIT });
    await page.waitForFunction(() => !document.querySelector("main")?.textContent?.includes("Loading"), null, { timeout: WAIT });
    const stored = await page.evaluate(() => JSON.parse(sessionStorage.getItem("flux7.console.connection") ?? "{}").adminToken ?? "");
    const text = await page.locator("main").innerText();
    return { after_load: afterLoad, stored_token: stored, refused, main: text.slice(0, 2000) };
  },
};

async function main() {
  const run = SCENARIOS[scenario];
  if (!run || !target) throw new Error(`usage: node e2e/crosssite.e2e.mjs <${Object.keys(SCENARIOS).join("|")}> --page URL`);
  const profile = await mkdtemp(join(tmpdir(), "flux7-e2e-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ARGS,
  });
  try {
    context.setDefaultTimeout(WAIT);
    const page = context.pages()[0] ?? (await context.newPage());
    return await run(page);
  } finally {
    await context.close();
    await rm(profile, { recursive: true, force: true });
  }
}

try {
  const result = await main();
  process.stdout.write(JSON.stringify({ ok: true, scenario, ...result }) + "\n");
} catch (e) {
  process.stdout.write(JSON.stringify({ ok: false, scenario, error: e.message }) + "\n");
  process.exitCode = 1;
}
