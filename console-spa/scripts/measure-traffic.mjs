// What the console costs the network, measured in Debian's Chromium against a running flux7 (issue 35, item 11):
// the bytes of a first load (empty cache), of a second load (warm cache), and of an Overview tab left alone,
// visible and then hidden, scaled to an hour. Bytes are what Chromium received (headers and bodies as sent,
// compressed or not: CDP's encodedDataLength). A hidden tab is emulated (document.visibilityState "hidden" and a
// visibilitychange event), as headless Chromium never hides a page itself.
//
//   node scripts/measure-traffic.mjs --base http://127.0.0.1:9090 --token T [--seconds 60] [--route "#/"]
//
// Prints one JSON object. tests/e2e/test_console_record.py runs the same measure (shorter) and checks it.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

export async function hideTab(page, hidden) {
  await page.evaluate((h) => {
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => (h ? "hidden" : "visible") });
    Object.defineProperty(document, "hidden", { configurable: true, get: () => h });
    document.dispatchEvent(new Event("visibilitychange", { bubbles: true }));
  }, hidden);
}

/** Counts what a page receives through CDP; `take()` returns the tally since the last take and starts anew;
 *  `settled()` resolves once no request is in flight (a poll sent just before a tab hides lands after it). */
export async function meter(page) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  const urls = new Map();
  let tally;
  const reset = () => {
    tally = { bytes: 0, requests: 0, notModified: 0, api: 0, apiBytes: 0, assets: 0, assetBytes: 0, byPath: {} };
  };
  reset();
  const inflight = new Set();
  const onSettled = [];
  const done = (id) => {
    inflight.delete(id);
    if (inflight.size === 0) onSettled.splice(0).forEach((resolve) => resolve());
  };
  cdp.on("Network.requestWillBeSent", (e) => inflight.add(e.requestId));
  cdp.on("Network.loadingFailed", (e) => done(e.requestId));
  cdp.on("Network.responseReceived", (e) => urls.set(e.requestId, { url: e.response.url, status: e.response.status }));
  cdp.on("Network.loadingFinished", (e) => {
    const r = urls.get(e.requestId);
    if (!r || !r.url.startsWith("http")) return;
    const path = new URL(r.url).pathname;
    const asset = path.startsWith("/console");
    tally.bytes += e.encodedDataLength;
    tally.requests += 1;
    if (r.status === 304) tally.notModified += 1;
    if (asset) {
      tally.assets += 1;
      tally.assetBytes += e.encodedDataLength;
    } else {
      tally.api += 1;
      tally.apiBytes += e.encodedDataLength;
    }
    const p = (tally.byPath[path] ??= { requests: 0, bytes: 0 });
    p.requests += 1;
    p.bytes += e.encodedDataLength;
  });
  cdp.on("Network.loadingFinished", (e) => done(e.requestId)); // after the tally above: a settled take sees it
  return {
    settled() {
      return inflight.size === 0 ? Promise.resolve() : new Promise((resolve) => onSettled.push(resolve));
    },
    take() {
      const t = tally;
      reset();
      return t;
    },
  };
}

/** Waits `ms` without a fixed sleep in the page: the page runs its own timers meanwhile. */
const idle = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function measure({ base, token, seconds, route = "#/", executablePath = "/usr/bin/chromium" }) {
  const profile = await mkdtemp(join(tmpdir(), "flux7-measure-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
    viewport: { width: 1280, height: 860 },
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const m = await meter(page);
    const loaded = async () => {
      await page.locator("main h1").first().waitFor({ timeout: 30_000 });
      await page.waitForFunction(() => !document.querySelector("main")?.textContent?.includes("Loading"), null, { timeout: 30_000 });
      await page.waitForLoadState("networkidle");
    };
    // The start-up link: the token rides in the fragment, the page stores it and clears it.
    await page.goto(`${base}/console/#token=${encodeURIComponent(token)}`);
    await page.waitForFunction(() => !location.hash.includes("token="));
    await page.goto(`${base}/console/${route}`);
    await loaded();
    const firstLoad = m.take();
    await page.reload();
    await loaded();
    const secondLoad = m.take();
    const perHour = (t) => ({ ...t, bytesPerHour: Math.round((t.bytes * 3600) / seconds), requestsPerHour: Math.round((t.requests * 3600) / seconds) });
    m.take();
    await idle(seconds * 1000);
    const visible = perHour(m.take());
    await hideTab(page, true);
    await m.settled();
    m.take();
    await idle(seconds * 1000);
    const hidden = perHour(m.take());
    await hideTab(page, false);
    return { seconds, route, firstLoad, secondLoad, visible, hidden };
  } finally {
    await context.close();
    await rm(profile, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { base: { type: "string" }, token: { type: "string", default: "" }, seconds: { type: "string", default: "60" }, route: { type: "string", default: "#/" } },
  });
  const out = await measure({ base: values.base.replace(/\/+$/, ""), token: values.token, seconds: Number(values.seconds), route: values.route });
  process.stdout.write(JSON.stringify(out) + "\n");
}
