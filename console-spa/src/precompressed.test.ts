// The committed build's compressed copies (vite.config.ts, precompress): each is the file it sits beside.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";

const assets = join(__dirname, "..", "dist", "assets");

describe("the build's precompressed assets", () => {
  it("decompress to the files they sit beside, brotli smaller than gzip", () => {
    const texts = readdirSync(assets).filter((f) => /\.(js|css)$/.test(f));
    expect(texts.length).toBeGreaterThanOrEqual(3);
    for (const f of texts) {
      const raw = readFileSync(join(assets, f));
      const br = readFileSync(join(assets, `${f}.br`));
      const gz = readFileSync(join(assets, `${f}.gz`));
      expect(brotliDecompressSync(br).equals(raw), f).toBe(true);
      expect(gunzipSync(gz).equals(raw), f).toBe(true);
      expect(br.length).toBeLessThan(gz.length);
    }
  });
});
