import { describe, expect, it } from "vitest";
import { durationProblem, formatCountdown, parseGoDuration } from "./durations";

describe("Go durations", () => {
  it("parses the strings the mesh writes for remaining time", () => {
    expect(parseGoDuration("4m59s")).toBe(299_000);
    expect(parseGoDuration("1h0m0s")).toBe(3_600_000);
    expect(parseGoDuration("1.5s")).toBe(1_500);
    expect(parseGoDuration("350ms")).toBe(350);
    expect(parseGoDuration("0s")).toBe(0);
    expect(parseGoDuration("-2s")).toBe(-2_000);
  });

  it("refuses text that is not a duration", () => {
    expect(parseGoDuration("")).toBeNull();
    expect(parseGoDuration("5 minutes")).toBeNull();
    expect(parseGoDuration("12")).toBeNull();
    expect(parseGoDuration(undefined)).toBeNull();
  });

  it("formats a countdown compactly and never negative", () => {
    expect(formatCountdown(299_000)).toBe("4m59s");
    expect(formatCountdown(3_723_000)).toBe("1h02m");
    expect(formatCountdown(1_200)).toBe("2s");
    expect(formatCountdown(-5)).toBe("0s");
  });
});

describe("a grant's duration", () => {
  it("says why a value cannot be one", () => {
    expect(durationProblem("1h30m")).toBe("");
    expect(durationProblem("15m")).toBe("");
    expect(durationProblem("1 hour")).toContain("is not a duration");
    expect(durationProblem("90")).toContain("is not a duration");
    expect(durationProblem("")).toContain("is not a duration");
    expect(durationProblem("0s")).toBe("A grant needs a duration above zero.");
  });
});
