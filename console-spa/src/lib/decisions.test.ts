import { describe, expect, it } from "vitest";
import { decisionParams, EMPTY_FILTERS, filterProblem, filtersFromQuery, filtersToQuery, pageInfo } from "./decisions";

const NOW = Date.parse("2026-12-01T12:00:00Z");

describe("decision filters", () => {
  it("read every filter from the URL and drop values the server would refuse", () => {
    const f = filtersFromQuery(new URLSearchParams("agent=claude&tool=fs.*&outcome=timeout&resolver=mem7&range=24h&page=3&size=25&trace=ab12"));
    expect(f).toEqual({ ...EMPTY_FILTERS, agent: "claude", tool: "fs.*", outcome: "timeout", resolver: "mem7", range: "24h", trace: "ab12", page: 3, size: 25 });
    const bad = filtersFromQuery(new URLSearchParams("outcome=allow&resolver=robot&range=forever&page=-2&size=7"));
    expect(bad).toEqual(EMPTY_FILTERS);
    expect(filtersFromQuery(new URLSearchParams("page=1.5")).page).toBe(1);
  });

  it("round-trip through the URL, leaving defaults out", () => {
    expect(filtersToQuery(EMPTY_FILTERS)).toEqual({});
    const f = { ...EMPTY_FILTERS, agent: "claude", resolver: "human", range: "custom", from: "2026-11-30T08:00", to: "2026-11-30T18:00", page: 2, size: 100 };
    const q = filtersToQuery(f);
    expect(q).toEqual({ agent: "claude", resolver: "human", range: "custom", from: "2026-11-30T08:00", to: "2026-11-30T18:00", page: "2", size: "100" });
    expect(filtersFromQuery(new URLSearchParams(q))).toEqual(f);
    // from/to only mean something with a custom range
    expect(filtersToQuery({ ...f, range: "7d" })).not.toHaveProperty("from");
  });

  it("become the route's parameters: a preset range is a since, a page is limit and offset", () => {
    expect(decisionParams(EMPTY_FILTERS, NOW)).toEqual({ limit: "50", offset: "0" });
    expect(decisionParams({ ...EMPTY_FILTERS, tool: "get_*", outcome: "denied", range: "1h", page: 3, size: 25 }, NOW)).toEqual({
      tool: "get_*",
      outcome: "denied",
      since: "2026-12-01T11:00:00.000Z",
      limit: "25",
      offset: "50",
    });
    const custom = decisionParams({ ...EMPTY_FILTERS, range: "custom", from: "2026-11-30T08:00", to: "2026-11-30T18:00" }, NOW);
    expect(custom.since).toBe(new Date("2026-11-30T08:00").toISOString());
    expect(custom.until).toBe(new Date("2026-11-30T18:00").toISOString());
  });

  it("refuse a custom range that ends before it starts", () => {
    expect(filterProblem({ ...EMPTY_FILTERS, range: "custom", from: "2026-11-30T18:00", to: "2026-11-30T08:00" })).toMatch(/after its start/);
    expect(filterProblem({ ...EMPTY_FILTERS, range: "custom", from: "2026-11-30T08:00" })).toBe("");
    expect(filterProblem({ ...EMPTY_FILTERS, range: "24h", from: "x", to: "y" })).toBe("");
  });

  it("say which rows a page holds", () => {
    expect(pageInfo(1, 50, 0)).toEqual({ first: 0, last: 0, pages: 1, hasPrev: false, hasNext: false });
    expect(pageInfo(2, 25, 60)).toEqual({ first: 26, last: 50, pages: 3, hasPrev: true, hasNext: true });
    expect(pageInfo(3, 25, 60)).toEqual({ first: 51, last: 60, pages: 3, hasPrev: true, hasNext: false });
  });
});

describe("a malformed glob in the filters", () => {
  it("is a problem to show, not a query that matches nothing", () => {
    expect(filterProblem({ ...EMPTY_FILTERS, agent: "batch-[" })).toBe("The agent filter is not a valid glob: the [ at position 7 is never closed with ].");
    expect(filterProblem({ ...EMPTY_FILTERS, tool: "get_\\" })).toContain("The tool filter is not a valid glob");
    expect(filterProblem({ ...EMPTY_FILTERS, agent: "batch-*", tool: "get_[a-z]*" })).toBe("");
  });
});
