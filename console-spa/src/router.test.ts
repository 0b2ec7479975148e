import { act, createElement } from "react";
import { createRoot } from "react-dom/client";
import { describe, expect, it } from "vitest";
import { currentRoute, href, match, navigate, parseHash, safeReturn, useLocation } from "./router";

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

  it("renders a navigation within the event that made it, before the browser's hashchange", () => {
    // A controlled checkbox whose state lives in the hash (the Graph page's filters): right after the click it
    // must show its new state, not the old one React restores until the location changes.
    (globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;
    window.location.hash = "#/graph";
    function Filter() {
      const hidden = useLocation().query.get("hide") === "tool";
      return createElement("input", {
        type: "checkbox",
        "aria-label": "Tools",
        checked: !hidden,
        onChange: () => navigate("/graph", { hide: hidden ? "" : "tool" }),
      });
    }
    const box = document.createElement("div");
    document.body.append(box);
    const root = createRoot(box);
    act(() => root.render(createElement(Filter)));
    const input = box.querySelector("input")!;
    expect(input.checked).toBe(true);
    const seen: boolean[] = [];
    window.addEventListener("hashchange", () => seen.push(input.checked), { once: true });
    act(() => input.click());
    expect(input.checked).toBe(false); // at once: no hashchange has been dispatched yet
    expect(seen).toEqual([]);
    expect(parseHash(window.location.hash).query.get("hide")).toBe("tool");
    act(() => root.unmount());
    box.remove();
  });
});

describe("coming back after signing in", () => {
  it("keeps a route of this console and refuses what could leave it", () => {
    expect(safeReturn("/approvals/abc?decision=approve")).toBe("/approvals/abc?decision=approve");
    expect(safeReturn("/oauth/consent?request=r1")).toBe("/oauth/consent?request=r1");
    for (const bad of ["", null, undefined, "approvals", "//evil.example", "/\\evil.example", "https://evil.example", "/login", "/login?next=/x", "/a\nb"]) {
      expect(safeReturn(bad)).toBeNull();
    }
  });

  it("reads the route now shown from the hash", () => {
    window.location.hash = "#/approvals/x1?decision=deny";
    expect(currentRoute()).toBe("/approvals/x1?decision=deny");
    window.location.hash = "";
    expect(currentRoute()).toBe("/");
  });
});
