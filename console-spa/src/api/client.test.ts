import { afterEach, describe, expect, it } from "vitest";
import { getSettings, meshBase, saveSettings } from "../settings";
import { serve, type TestServer } from "../test/harness";
import { ApiError, mesh, request } from "./client";
import { callMemoryTool, MemoryError } from "./memory";

let server: TestServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
  sessionStorage.clear();
  localStorage.clear();
});

const blank = { baseUrl: "", adminToken: "", memoryToken: "", supervisorUrl: "", supervisorToken: "" };

describe("connection settings", () => {
  it("keep the token in sessionStorage only, and default the base URL to the page's origin", () => {
    saveSettings({ ...blank, adminToken: "s3cret" });
    expect(sessionStorage.getItem("flux7.console.connection")).toContain("s3cret");
    expect(JSON.stringify({ ...localStorage })).not.toContain("s3cret");
    expect(getSettings().adminToken).toBe("s3cret");
    expect(meshBase()).toBe(window.location.origin);
    saveSettings({ ...blank, baseUrl: "http://mesh.example:9090///" });
    expect(meshBase()).toBe("http://mesh.example:9090");
  });
});

describe("requests", () => {
  it("send the bearer admin token when set and no Authorization header otherwise", async () => {
    server = await serve(() => ({ status: 200, body: [] }));
    saveSettings({ ...blank, baseUrl: server.url, adminToken: "tok" });
    await mesh.get("/grants");
    saveSettings({ ...blank, baseUrl: server.url });
    await mesh.get("/grants", { agent: "a b", tool: "" });
    expect(server.requests.map((r) => r.authorization)).toEqual(["Bearer tok", ""]);
  });

  it("turn a 401 into an ApiError that says the token was refused", async () => {
    server = await serve(() => ({ status: 401, body: { error: "control plane requires admin authorization" } }));
    saveSettings({ ...blank, baseUrl: server.url, adminToken: "bad" });
    const err = await mesh.get("/halts").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).unauthorized).toBe(true);
    expect((err as ApiError).message).toBe("control plane requires admin authorization");
  });

  it("report an unreachable server as status 0 with the address", async () => {
    saveSettings({ ...blank, baseUrl: "http://127.0.0.1:9" });
    const err = (await request("mesh", "/health").catch((e: unknown) => e)) as ApiError;
    expect(err.status).toBe(0);
    expect(err.message).toContain("Cannot reach http://127.0.0.1:9");
  });

  it("refuse a supervisor call when no supervisor URL is set", async () => {
    saveSettings(blank);
    const err = (await request("supervisor", "/status").catch((e: unknown) => e)) as ApiError;
    expect(err.realm).toBe("supervisor");
    expect(err.message).toContain("not set");
  });
});

describe("memory JSON-RPC", () => {
  it("sends tools/call without empty arguments and uses the memory token over the admin token", async () => {
    server = await serve(({ body }) => ({
      status: 200,
      body: { jsonrpc: "2.0", id: (body as { id: number }).id, result: { content: [{ type: "text", text: "No memories found." }] } },
    }));
    saveSettings({ ...blank, baseUrl: server.url, adminToken: "admin", memoryToken: "mem" });
    expect(await callMemoryTool("memory_list", { tags: [], agent: "", key: "k" })).toBe("No memories found.");
    const r = server.requests[0]!;
    expect(r.path).toBe("/rpc");
    expect(r.authorization).toBe("Bearer mem");
    expect(r.body).toMatchObject({ jsonrpc: "2.0", method: "tools/call", params: { name: "memory_list", arguments: { key: "k" } } });
  });

  it("raises the tool's own text for isError results and JSON-RPC errors", async () => {
    let n = 0;
    server = await serve(() =>
      n++ === 0
        ? { status: 200, body: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "key and value are required" }], isError: true } } }
        : { status: 200, body: { jsonrpc: "2.0", id: 2, error: { code: -32601, message: "method not found: x" } } },
    );
    saveSettings({ ...blank, baseUrl: server.url });
    await expect(callMemoryTool("memory_store", {})).rejects.toThrow(new MemoryError("key and value are required"));
    await expect(callMemoryTool("memory_store", {})).rejects.toThrow("method not found: x");
  });
});
