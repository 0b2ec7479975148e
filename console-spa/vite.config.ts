import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";
import { defineConfig, type Plugin } from "vitest/config";
import react from "@vitejs/plugin-react";

/** Writes a brotli (.br) and a gzip (.gz) copy beside each text file of the build, so the server sends them as
 *  they are (functions/console_assets.py picks one by Accept-Encoding). Same input, same bytes: zlib writes no
 *  time or name into either format, and the levels are fixed, so the committed dist/ stays reproducible. */
function precompress(): Plugin {
  const TEXT = /\.(js|css|html|svg|json|txt)$/;
  const MIN_BYTES = 1024; // below this the headers outweigh the saving
  return {
    name: "flux7-precompress",
    apply: "build",
    enforce: "post",
    writeBundle(options, bundle) {
      const dir = options.dir!;
      for (const name of Object.keys(bundle).sort()) {
        if (!TEXT.test(name)) continue;
        const raw = readFileSync(join(dir, name));
        if (raw.length < MIN_BYTES) continue;
        const br = brotliCompressSync(raw, {
          params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT, [constants.BROTLI_PARAM_SIZE_HINT]: raw.length },
        });
        const gz = gzipSync(raw, { level: 9 });
        if (br.length < raw.length) writeFileSync(join(dir, `${name}.br`), br);
        if (gz.length < raw.length) writeFileSync(join(dir, `${name}.gz`), gz);
      }
    },
  };
}

// base './' keeps every asset URL relative, so the same dist works at /console/, at / and from a file server.
export default defineConfig({
  base: "./",
  plugins: [react(), precompress()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    // Stable names without content hashes would break caching; hashed names are deterministic for identical sources.
    assetsDir: "assets",
    // The largest chunk is cytoscape (about 440 kB), loaded only by the Graph page; the entry chunk stays below 460 kB
    // (rarely opened pages load on demand: src/App.tsx).
    chunkSizeWarningLimit: 460,
  },
  test: {
    environment: "jsdom",
    globals: true,
    include: ["src/**/*.test.{ts,tsx}"],
  },
});
