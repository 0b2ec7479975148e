import { describe, expect, it } from "vitest";
import { globMatch, globProblem } from "./glob";

describe("policy globs (Go filepath.Match)", () => {
  it("matches stars within a segment but not across a slash", () => {
    expect(globMatch("github.*", "github.create_issue")).toBe(true);
    expect(globMatch("*", "fs.read")).toBe(true);
    expect(globMatch("*", "a/b")).toBe(false);
    expect(globMatch("fs.?ead", "fs.read")).toBe(true);
  });

  it("matches by plain equality even when the pattern is not a valid glob", () => {
    expect(globMatch("weird[", "weird[")).toBe(true);
    expect(globMatch("weird[", "weirdx")).toBe(false);
  });

  it("supports character classes and their negation", () => {
    expect(globMatch("v[0-9]", "v7")).toBe(true);
    expect(globMatch("v[!0-9]", "v7")).toBe(false);
    expect(globMatch("v[!0-9]", "vx")).toBe(true);
  });
});

describe("malformed globs", () => {
  it("say what is wrong instead of matching nothing", () => {
    expect(globProblem("claude")).toBe("");
    expect(globProblem("batch-*")).toBe("");
    expect(globProblem("v[0-9]")).toBe("");
    expect(globProblem("v[!a-c]x")).toBe("");
    expect(globProblem("a\\[b")).toBe("");
    expect(globProblem("fs.]")).toBe("");
    expect(globProblem("batch-[")).toBe("the [ at position 7 is never closed with ]");
    expect(globProblem("claude[ab")).toBe("the [ at position 7 is never closed with ]");
    expect(globProblem("x[]")).toContain("empty");
    expect(globProblem("x[a-]")).toContain("no end");
    expect(globProblem("tool\\")).toContain("lone \\");
  });
});
