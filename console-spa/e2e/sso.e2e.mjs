// Single sign-on in a real browser: Debian's Chromium (playwright-core) signs people in to a running `flux7 serve`
// through a real OpenID Connect provider (oidc-provider-mock) and works the approval queue as each of them.
// tests/e2e/test_console_sso.py starts both processes, plays the agents and checks the server's side; this script
// does the clicking and reports what it saw as one JSON object on stdout (exit 0), or {ok: false, error} (exit 1).
//
//   node e2e/sso.e2e.mjs <alice|others> --base http://127.0.0.1:9090 --params '{"approve": "<id>", …}'
//
// Every wait is a condition with a timeout, never a sleep. A page error, or a console error or warning of the
// console's own origin, fails the scenario (except the 401s of a tab nobody has signed in to yet); axe-core's
// serious and critical violations fail it too, in both themes. Requests off loopback are refused (the provider's
// page links a stylesheet on a CDN), so nothing leaves the machine.
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");
const ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];
const SHOTS = fileURLToPath(new URL("../screenshots/e2e/", import.meta.url));
const WAIT = 15_000;

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { base: { type: "string" }, params: { type: "string", default: "{}" } },
});
const scenario = positionals[0] ?? "";
const base = (values.base ?? "").replace(/\/+$/, "");
const params = JSON.parse(values.params);

const problems = [];
let where = "start";
let allow401 = true; // nobody is signed in at first
/** A refusal the scenario expects (Chromium logs a page answered with an error status as a console error). */
let expectedRefusal = "";

function watch(page) {
  page.on("pageerror", (e) => problems.push(`${where}: page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() !== "error" && m.type() !== "warning") return;
    const url = m.location().url ?? "";
    if (!url.startsWith(base)) return; // the provider's own page is not under test
    if (allow401 && m.text().includes("status of 401")) return;
    if (expectedRefusal && url.startsWith(`${base}${expectedRefusal}`) && m.text().includes("status of 403")) return;
    problems.push(`${where}: console ${m.type()}: ${m.text()} (${url})`);
  });
  page.on("dialog", (d) => void d.accept());
}

async function waitLoaded(page) {
  await page.waitForFunction(() => !document.querySelector("main")?.textContent?.includes("Loading"), null, { timeout: WAIT });
}

async function open(page, route) {
  where = route;
  await page.goto("about:blank");
  await page.goto(`${base}/console/${route}`);
  await page.locator("main h1").first().waitFor();
  await waitLoaded(page);
}

async function shot(page, name) {
  await mkdir(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/** axe-core in light and dark: serious and critical violations become problems, named by page. */
async function accessible(page, name) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.addScriptTag({ content: await readFile(AXE, "utf8") });
    const found = await page.evaluate(async () => {
      const r = await window.axe.run(document, { resultTypes: ["violations"] });
      return r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(" ")}`));
    });
    for (const v of found) problems.push(`${name} (${scheme}): axe: ${v}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
}

/** Signs `sub` in through the provider's form, from the console's sign-in page. Returns the page the provider's
 *  answer lands on: the console (signed in) or the server's refusal page. */
async function signIn(page, sub, { accessibility = false } = {}) {
  allow401 = true;
  await open(page, "#/login");
  const button = page.getByRole("link", { name: /^Sign in with / });
  await button.waitFor();
  if (accessibility) {
    await accessible(page, "login");
    await shot(page, "sso-login");
  }
  where = `provider (${sub})`;
  await button.click();
  await page.locator('input[name="sub"]').fill(sub);
  await page.getByRole("button", { name: "Authorize", exact: true }).click();
  await page.waitForURL((u) => u.href.startsWith(base), { timeout: WAIT });
}

async function signedInAs(page, sub) {
  const who = page.locator(`.who[data-actor="user:${sub}"]`);
  await who.waitFor();
  allow401 = false;
  return (await who.innerText()).replace(/\s+/g, " ").trim();
}

async function logOut(page) {
  allow401 = true;
  where = "log out";
  await page.locator(".who").getByRole("button", { name: "Log out" }).click();
  await page.getByRole("link", { name: /^Sign in with / }).waitFor();
}

const squash = (t) => t.replace(/\s+/g, " ").trim();
const row = (page, id) => page.locator(`tr[data-approval="${id}"]`);

const SCENARIOS = {
  /** alice (an approver for the pets) signs in, reads a call's arguments and diff, approves it; gives the first
   *  of two approvals a four-eyes call needs; denies a third call with a reason. */
  async alice(page) {
    await signIn(page, "alice", { accessibility: true });
    const header = await signedInAs(page, "alice");
    await open(page, "#/approvals");
    const first = row(page, params.approve);
    await first.waitFor();
    const approve = first.getByRole("button", { name: "Approve" });
    const blind = await approve.isDisabled();
    const summary = (await first.locator(".call-args summary").innerText()).trim();
    await first.locator(".call-args summary").click();
    await first.locator(".diff-add").first().waitFor();
    const diff = {
      caption: (await first.locator(".diff figcaption").innerText()).replace(/\s+/g, " ").trim(),
      added: (await first.locator(".diff-add").allInnerTexts()).map(squash),
      removed: (await first.locator(".diff-del").allInnerTexts()).map(squash),
      addedColour: await first.locator(".diff-add").first().evaluate((e) => getComputedStyle(e).backgroundColor),
    };
    const args = await first.locator(".params").innerText();
    await page.waitForFunction((id) => !document.querySelector(`tr[data-approval="${id}"] button.btn-ok`)?.disabled, params.approve);
    await accessible(page, "approvals with a diff");
    await shot(page, "sso-approvals-diff");
    await approve.click();
    await first.waitFor({ state: "detached" });

    const four = row(page, params.fourEyes);
    const before = (await four.locator(".four-eyes").innerText()).trim();
    await four.getByRole("button", { name: "Approve" }).click();
    await four.locator(".four-eyes", { hasText: "1 of 2" }).waitFor();
    const after = (await four.locator(".four-eyes").innerText()).trim();
    const mine = (await four.locator(".not-yours").innerText()).trim();
    await shot(page, "sso-four-eyes");

    // On a phone, the Overview's pending list is one card per call, its arguments inline as on the desktop.
    await page.setViewportSize({ width: 390, height: 844 });
    await open(page, "#/");
    const card = row(page, params.deny);
    await card.locator(".params").waitFor();
    const phone = { args: squash(await card.locator(".params").innerText()), approve: await card.getByRole("button", { name: "Approve" }).isEnabled() };
    await accessible(page, "overview on a phone");
    await shot(page, "sso-overview-phone");
    await page.setViewportSize({ width: 1280, height: 860 });
    await open(page, "#/approvals");

    const third = row(page, params.deny);
    await third.getByPlaceholder("reasoning (optional)").fill(params.reason);
    await third.getByRole("button", { name: "Deny" }).click();
    await third.waitFor({ state: "detached" });

    await open(page, "#/traces");
    await page.locator("td", { hasText: "by user:alice" }).first().waitFor();
    const actors = await page.locator("td .actor").allInnerTexts();
    await open(page, "#/agents");
    const agents = await page.locator("main table").first().locator("tbody tr td:first-child").allInnerTexts();
    return { header, blind, summary, diff, args, fourEyes: { before, after, mine }, phone, actors, agents };
  },

  /** dave reads the approval email (its HTML part, as a mail client shows it) and follows its Approve link while
   *  signed out: the approval's page sends him to sign in and back to it, the decision the link chose still
   *  pre-selected, and he confirms it there (docs/approvals.md "Email"). */
  async emailLink(page) {
    where = "the email";
    await page.setViewportSize({ width: 760, height: 600 });
    await page.setContent(params.email);
    const email = squash(await page.locator("body").innerText());
    await shot(page, "approval-email");
    const approveLink = page.getByRole("link", { name: "Approve…" });
    const link = await approveLink.getAttribute("href");
    await page.setViewportSize({ width: 1280, height: 860 });
    await approveLink.click();
    await page.waitForURL((u) => u.hash.startsWith(`#/approvals/${params.approval}`), { timeout: WAIT });
    where = "the approval, signed out";
    await page.locator("header").getByRole("link", { name: "Log in" }).click();
    await page.getByText("After signing in you go back to the page that sent you here.").waitFor();
    const loginHash = new URL(page.url()).hash;
    await shot(page, "sso-login-return");
    where = "provider (dave)";
    await page.getByRole("link", { name: /^Sign in with / }).click();
    await page.locator('input[name="sub"]').fill("dave");
    await page.getByRole("button", { name: "Authorize", exact: true }).click();
    await page.waitForURL((u) => u.href.startsWith(base), { timeout: WAIT });
    const header = await signedInAs(page, "dave");
    where = "the approval, signed in";
    await page.getByText("You followed the email link to approve this call.").waitFor();
    const landed = new URL(page.url()).hash;
    const focused = await page.evaluate(() => document.activeElement?.textContent?.trim() ?? "");
    await accessible(page, "an approval from an email link");
    await shot(page, "approval-from-email");
    await page.getByRole("button", { name: "Approve", exact: true }).click();
    // The page reloads the approval once decided: the form gives way to its outcome.
    await page.getByText("This approval is approved; nothing to decide.").waitFor();
    return { email, link, loginHash, header, landed, focused };
  },

  /** bob (a viewer) and carol (an approver for other tools) see the four-eyes call but may not decide it; eve,
   *  whom no role maps, is refused with a page that says why. */
  async others(page) {
    const out = {};
    await signIn(page, "bob");
    out.bobHeader = await signedInAs(page, "bob");
    await open(page, "#/approvals");
    const pending = row(page, params.pending);
    await pending.locator(".not-yours").waitFor();
    out.bob = {
      row: (await pending.innerText()).replace(/\s+/g, " "),
      buttons: await pending.getByRole("button").count(),
    };
    await accessible(page, "approvals as a viewer");
    await open(page, `#/approvals/${params.decided}`);
    out.bob.resolvedBy = (await page.locator("dt", { hasText: "Resolved by" }).locator("xpath=following-sibling::dd[1]").innerText()).trim();
    await open(page, "#/grants");
    out.bob.grantForm = await page.getByRole("button", { name: "Grant", exact: true }).count();
    await open(page, "#/halts");
    out.bob.stopButton = await page.getByRole("button", { name: "Stop", exact: true }).count();
    await logOut(page);

    await signIn(page, "carol");
    out.carolHeader = await signedInAs(page, "carol");
    await open(page, "#/approvals");
    await row(page, params.pending).locator(".not-yours").waitFor();
    out.carol = {
      row: (await row(page, params.pending).innerText()).replace(/\s+/g, " "),
      buttons: await row(page, params.pending).getByRole("button").count(),
    };
    await logOut(page);

    expectedRefusal = "/login/oidc/callback";
    await signIn(page, "eve");
    where = "refusal page";
    await page.locator("h1", { hasText: "Sign-in refused" }).waitFor();
    out.eve = { url: page.url(), text: (await page.locator("main").innerText()).replace(/\s+/g, " ") };
    await accessible(page, "refusal page");
    await shot(page, "sso-refused");
    return out;
  },
};

async function main() {
  const run = SCENARIOS[scenario];
  if (!run || !base) throw new Error(`usage: node e2e/sso.e2e.mjs <${Object.keys(SCENARIOS).join("|")}> --base URL --params JSON`);
  const profile = await mkdtemp(join(tmpdir(), "flux7-sso-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 860 },
  });
  try {
    context.setDefaultTimeout(WAIT);
    // Loopback only: the provider's page asks a CDN for its stylesheet, which is refused here, not fetched.
    await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/]|localhost[:/])/, (r) => r.abort());
    const page = context.pages()[0] ?? (await context.newPage());
    watch(page);
    try {
      return await run(page);
    } catch (e) {
      await mkdir(SHOTS, { recursive: true });
      await page.screenshot({ path: join(SHOTS, `failed-sso-${scenario}.png`), fullPage: true }).catch(() => {});
      throw new Error(`${where}: ${e.message}`);
    } finally {
      if (problems.length) throw new Error(problems.join("\n"));
    }
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
