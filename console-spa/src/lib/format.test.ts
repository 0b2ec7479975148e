import { describe, expect, it } from "vitest";
import { timeAgo } from "./format";

describe("timeAgo", () => {
  const now = Date.parse("2026-12-05T12:00:00Z");

  it("says how long ago a past time was", () => {
    expect(timeAgo("2026-12-05T11:59:48Z", now)).toBe("12s ago");
    expect(timeAgo("2026-12-05T11:57:00Z", now)).toBe("3m ago");
    expect(timeAgo("2026-12-05T10:00:00Z", now)).toBe("2h ago");
    expect(timeAgo("2026-12-01T12:00:00Z", now)).toBe("4d ago");
    expect(timeAgo("2026-12-05T12:00:00Z", now)).toBe("0s ago");
  });

  it("says how far off a time to come is, as an expiry needs", () => {
    expect(timeAgo("2026-12-05T12:14:00Z", now)).toBe("in 14m");
    expect(timeAgo("2026-12-05T12:00:30Z", now)).toBe("in 30s");
    expect(timeAgo("2026-12-06T13:00:00Z", now)).toBe("in 1d");
  });

  it("gives back what it cannot read, and nothing for nothing", () => {
    expect(timeAgo("not a time", now)).toBe("not a time");
    expect(timeAgo(null, now)).toBe("");
  });
});
