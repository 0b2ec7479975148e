import { defineConfig } from "vitest/config";
import react from "@vitejs/plugin-react";

// base './' keeps every asset URL relative, so the same dist works at /console/, at / and from a file server.
export default defineConfig({
  base: "./",
  plugins: [react()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    // Stable names without content hashes would break caching; hashed names are deterministic for identical sources.
    assetsDir: "assets",
    // The largest chunk is cytoscape (about 440 kB), loaded only by the Graph page; the entry chunk stays below 430 kB.
    chunkSizeWarningLimit: 460,
  },
  test: {
    environment: "jsdom",
    globals: true,
    include: ["src/**/*.test.{ts,tsx}"],
  },
});
