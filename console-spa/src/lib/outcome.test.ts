import { describe, expect, it } from "vitest";
import type { TraceEntry } from "../api/types";
import { callOutcome } from "./outcome";

const t = (over: Partial<TraceEntry>): TraceEntry => ({ trace_id: "t", agent_id: "a", tool: "x", params: {}, policy: "allow", timestamp: "2026-12-01T00:00:00Z", status_code: 200, ...over });

describe("a call's outcome beside its policy", () => {
  it("names the failure of an allowed call: the upstream's 500, the arguments' 400", () => {
    expect(callOutcome(t({ status_code: 500, error: "backend returned HTTP 500" }))).toEqual({ key: "failed", label: "failed 500", title: "backend returned HTTP 500" });
    expect(callOutcome(t({ status_code: 400 }))).toEqual({ key: "failed", label: "failed 400", title: "the tool answered HTTP 400" });
    // an approved call that then failed failed too
    expect(callOutcome(t({ policy: "human_approval", approval_status: "approved", status_code: 502, error: "boom" }))?.label).toBe("failed 502");
  });

  it("says nothing of a success, a refusal or a call still in flight", () => {
    expect(callOutcome(t({}))).toBeNull();
    expect(callOutcome(t({ policy: "deny", status_code: 403, error: "denied by policy" }))).toBeNull();
    expect(callOutcome(t({ policy: "human_approval", approval_status: "timeout", status_code: 408 }))).toBeNull();
    expect(callOutcome(t({ status_code: 0 }))).toBeNull();
  });
});
