import { fireEvent, render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { TraceEntry, TraceVerify } from "../api/types";
import { VerifyReport } from "../pages/Traces";
import { TraceTable } from "./TraceTable";

const base: TraceEntry = {
  trace_id: "aaaaaaaa11111111",
  agent_id: "claude",
  tool: "list_pets",
  params: {},
  policy: "allow",
  policy_rule: "agents",
  status_code: 200,
  latency_ms: 3,
  timestamp: "2026-12-01T10:00:00Z",
};

describe("TraceTable", () => {
  it("shows a failed call's outcome beside the policy that let it through", () => {
    const boom: TraceEntry = { ...base, trace_id: "cccccccc33333333", tool: "get_boom", status_code: 500, error: "backend returned HTTP 500" };
    const badArgs: TraceEntry = { ...base, trace_id: "dddddddd44444444", tool: "get_animal", status_code: 400, error: "backend returned HTTP 400" };
    render(<TraceTable traces={[boom, badArgs, base]} />);
    const [r500, r400, ok] = screen.getAllByRole("row").slice(1).map((r) => within(r));
    for (const [row, code] of [[r500!, 500], [r400!, 400]] as const) {
      expect(row.getByText("allow").className).toBe("badge badge-ok"); // what the policy decided, still shown
      const failed = row.getByText(`failed ${code}`);
      expect(failed.className).toBe("badge badge-bad");
      expect(failed.getAttribute("title")).toBe(`backend returned HTTP ${code}`);
    }
    expect(ok!.queryByText(/failed/)).toBeNull();
  });

  it("marks a call whose intent has no outcome (status_code 0) as outcome unknown", () => {
    const unknown: TraceEntry = { ...base, trace_id: "bbbbbbbb22222222", tool: "hang", status_code: 0, latency_ms: 7 };
    render(<TraceTable traces={[unknown, base]} />);
    const rows = screen.getAllByRole("row").slice(1);
    const hung = within(rows[0]!);
    const badge = hung.getByText("outcome unknown");
    expect(badge.className).toBe("badge badge-warn");
    expect(badge.getAttribute("title")).toContain("may have reached its upstream");
    expect(hung.queryByText("0")).toBeNull(); // no HTTP status pretends to be one
    expect(within(rows[1]!).queryByText("outcome unknown")).toBeNull();
    expect(within(rows[1]!).getByText("200")).toBeTruthy();

    fireEvent.click(hung.getByRole("button", { name: "Details" }));
    expect(screen.getByText(/^Unknown: The call was authorised/)).toBeTruthy();
  });
});

describe("VerifyReport", () => {
  it("lists the calls with outcome unknown beside a chain that holds", () => {
    const r: TraceVerify = {
      lines: 3,
      unchained: 0,
      chained: 3,
      first_seq: 1,
      last_seq: 3,
      alg: "sha256",
      outcome_unknown: 1,
      outcome_unknown_calls: [{ trace_id: "bbbbbbbb22222222", seq: 2, agent_id: "claude", tool: "hang", timestamp: "2026-12-01T10:00:00Z" }],
    };
    render(<VerifyReport r={r} />);
    expect(screen.getByRole("status").textContent).toContain("The trace chain holds");
    const note = screen.getByRole("note");
    expect(note.textContent).toContain("1 call with outcome unknown");
    expect(within(note).getByRole("link", { name: "bbbbbbbb" }).getAttribute("href")).toBe("#/traces?trace=bbbbbbbb22222222");
  });

  it("says nothing about outcomes when every call has one", () => {
    render(<VerifyReport r={{ lines: 1, unchained: 0, chained: 1 }} />);
    expect(screen.queryByRole("note")).toBeNull();
  });
});
