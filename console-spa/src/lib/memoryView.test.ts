import { describe, expect, it } from "vitest";
import { isSystemFact, tagView } from "./memoryView";

describe("memory facts on the page", () => {
  it("tell the system's decision facts from stored memories", () => {
    expect(isSystemFact({ key: "decision.create_pet.849a3cf4a981993c", tags: ["decision", "denied", "create_pet"] })).toBe(true);
    expect(isSystemFact({ key: "pets.tortoise", tags: ["pets"] })).toBe(false);
    expect(isSystemFact({ key: "decision.notes", tags: ["pets"] })).toBe(false); // a key alone does not make it one
  });

  it("show an epoch tag as a time and cut signatures and ids", () => {
    expect(tagView("at:1796458264731")).toEqual({ text: "at", title: "at:1796458264731", at: "2026-12-05T08:11:04.731Z" });
    expect(tagView("at:1796458264").at).toBe("2026-12-05T08:11:04.000Z");
    const sig = "sig:36a0a506dcfcf35724f4fbdd594aa1d1a912f1e346cd9ebda83069d9a640a555";
    expect(tagView(sig)).toEqual({ text: "sig:36a0a506…", title: sig });
    expect(tagView("trace:df9f38a921ffbc16de56b5d789bbe39c").text).toBe("trace:df9f38a9…");
    expect(tagView("approval:849a3cf4").text).toBe("approval:849a3cf4");
    expect(tagView("pets")).toEqual({ text: "pets", title: "pets" });
  });
});
