// Rebuilds into a temporary folder and compares it byte for byte with the committed dist/.
// Exit 1 (with the differing files) when dist/ is not what the sources produce. Usage: npm run check:dist
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "vite";

const root = fileURLToPath(new URL("..", import.meta.url));
const committed = join(root, "dist");

async function files(dir) {
  const out = new Map();
  const walk = async (d) => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else out.set(relative(dir, p), await readFile(p));
    }
  };
  await walk(dir).catch(() => {});
  return out;
}

const tmp = await mkdtemp(join(tmpdir(), "flux7-console-dist-"));
try {
  await build({ root, logLevel: "warn", build: { outDir: tmp, emptyOutDir: true } });
  const [want, have] = await Promise.all([files(tmp), files(committed)]);
  const diffs = [];
  for (const [name, bytes] of want) if (!have.has(name)) diffs.push(`missing from dist/: ${name}`);
  else if (!have.get(name).equals(bytes)) diffs.push(`differs: ${name}`);
  for (const name of have.keys()) if (!want.has(name)) diffs.push(`stale in dist/: ${name}`);
  if (diffs.length) {
    console.error(`console-spa/dist is not what the sources build (run npm run build and commit dist/):\n  ${diffs.join("\n  ")}`);
    process.exitCode = 1;
  } else {
    console.log(`console-spa/dist matches the sources (${want.size} files)`);
  }
} finally {
  await rm(tmp, { recursive: true, force: true });
}
