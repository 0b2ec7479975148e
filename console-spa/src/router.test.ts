import { describe, expect, it } from "vitest";
import { href, match, parseHash } from "./router";

describe("hash router", () => {
  it("splits path and query and drops a trailing slash", () => {
    const loc = parseHash("#/traces/?agent=claude&trace=abc");
    expect(loc.path).toBe("/traces");
    expect(loc.query.get("agent")).toBe("claude");
    expect(parseHash("").path).toBe("/");
    expect(parseHash("#").path).toBe("/");
  });

  it("matches parameters and decodes them", () => {
    expect(match("/agents/:id", "/agents/team%2Fbot")).toEqual({ id: "team/bot" });
    expect(match("/agents/:id", "/agents")).toBeNull();
    expect(match("/agents/:id", "/sessions/x")).toBeNull();
  });

  it("builds links without empty query values", () => {
    expect(href("/traces", { agent: "a b", tool: "", trace: undefined })).toBe("#/traces?agent=a+b");
    expect(href("/")).toBe("#/");
  });
});
