import { describe, expect, it } from "vitest";
import { globMatch } from "./glob";

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
