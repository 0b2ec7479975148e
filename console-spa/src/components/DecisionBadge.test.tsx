import { render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { TraceEntry } from "../api/types";
import { decisionState } from "../lib/decisions";
import { DecisionBadge } from "./bits";
import { TraceTable } from "./TraceTable";

const STATES: [status: string, by: string | undefined, key: string, label: string, tone: string][] = [
  ["pending", undefined, "pending", "pending", "warn"],
  ["approved", "alice", "approved-human", "approved by human", "ok"],
  ["approved", "http:127.0.0.1:5133", "approved-human", "approved by human", "ok"],
  ["approved", "supervisor:sup7", "approved-supervisor", "approved by supervisor", "ok"],
  ["approved", "mcp:reviewer", "approved-supervisor", "approved by supervisor", "ok"],
  ["approved", "supervisor:mem7", "approved-precedent", "approved by precedent", "ok"],
  ["denied", "bob", "denied-human", "denied by human", "bad"],
  ["denied", "supervisor:sup7", "denied-supervisor", "denied by supervisor", "bad"],
  ["denied", "system:halt", "denied-system", "denied by system", "bad"],
  ["timeout", "system:timeout", "timeout", "refused: timed out", "bad"],
];

describe("DecisionBadge", () => {
  it.each(STATES)("%s by %s is %s", (status, by, key, label, tone) => {
    render(<DecisionBadge status={status} by={by} />);
    const badge = screen.getByText(label);
    expect(badge.getAttribute("data-decision")).toBe(key);
    expect(badge.className).toBe(`badge badge-${tone}`);
  });

  it("never shows a timeout in green, whoever is named as its resolver", () => {
    for (const by of [undefined, "", "system:timeout", "alice", "supervisor:mem7"]) {
      const s = decisionState("timeout", by)!;
      expect(s.tone).toBe("bad");
      expect(s.label).toBe("refused: timed out");
    }
  });

  it("takes the server's kind of the resolver over its name: sup7 holding the admin token is a supervisor", () => {
    render(<DecisionBadge status="approved" by="owner:admin-token" kind="supervisor" />);
    expect(screen.getByText("approved by supervisor").getAttribute("data-decision")).toBe("approved-supervisor");
    expect(decisionState("approved", "owner:admin-token")!.key).toBe("approved-human"); // without it, a human
    expect(decisionState("denied", "owner:admin-token", "mem7")!.label).toBe("denied by precedent");
  });

  it("renders nothing without a status", () => {
    const { container } = render(<DecisionBadge status={undefined} />);
    expect(container.textContent).toBe("");
  });
});

const call: TraceEntry = {
  trace_id: "cccccccc33333333",
  agent_id: "claude",
  tool: "create_pet",
  params: {},
  policy: "human_approval",
  policy_rule: "agents",
  status_code: 408,
  timestamp: "2026-12-01T10:00:00Z",
  approval_id: "0123456789abcdef",
  approval_status: "timeout",
  approved_by: "system:timeout",
};

describe("trace outcomes", () => {
  it("show a timed-out approval as a refusal, with no allow badge beside it (the mesh.approval event too)", () => {
    const event: TraceEntry = { ...call, trace_id: "dddddddd44444444", tool: "mesh.approval", policy: "allow", status_code: 200 };
    render(<TraceTable traces={[call, event]} />);
    for (const row of screen.getAllByRole("row").slice(1)) {
      const cell = within(row).getByText("refused: timed out").closest("td")!;
      expect(cell.textContent).not.toMatch(/allow/);
      expect(cell.querySelector(".badge-ok")).toBeNull();
    }
  });

  it("show who approved, including a precedent's auto-approval (rule supervisor:mem7), and a waiting call", () => {
    const human: TraceEntry = { ...call, status_code: 200, approval_status: "approved", approved_by: "alice" };
    const precedent: TraceEntry = { ...call, trace_id: "eeeeeeee55555555", policy: "allow", policy_rule: "supervisor:mem7", status_code: 200, approval_id: undefined, approval_status: undefined, approved_by: undefined };
    const waiting: TraceEntry = { ...call, trace_id: "ffffffff66666666", status_code: 202, approval_status: undefined, approved_by: undefined };
    const denied: TraceEntry = { ...call, trace_id: "9999999977777777", policy: "deny", policy_rule: "agents", status_code: 403, approval_id: undefined, approval_status: undefined };
    render(<TraceTable traces={[human, precedent, waiting, denied]} />);
    const cells = screen.getAllByRole("row").slice(1).map((r) => r.querySelectorAll("td")[3]!);
    expect([...cells].map((c) => c.querySelector("[data-decision]")?.getAttribute("data-decision") ?? c.textContent)).toEqual([
      "approved-human",
      "approved-precedent",
      "pending",
      "deny",
    ]);
  });
});
