// Decisions: one badge per approval state, and the filters of the Decisions page (kept in the URL).
import { globProblem } from "./glob";
import { resolverKind } from "./format";

export type DecisionTone = "ok" | "bad" | "warn" | "muted";

export interface DecisionState {
  /** pending | approved-human | approved-supervisor | approved-precedent | approved-system | denied-… | timeout */
  key: string;
  label: string;
  tone: DecisionTone;
  title: string;
}

const WHO: Record<string, string> = { human: "human", supervisor: "supervisor", mem7: "precedent", system: "system", timeout: "system" };

/** The one badge an approval shows. A timeout is a refusal (the call did not run): never green. `kind` is the
 *  server's classification of the resolver (`resolver_kind`), which wins: the resolver is named by its credential
 *  (`owner:admin-token`) while the request may have said a machine acted (sup7 on the admin token). */
export function decisionState(status: string | undefined | null, resolvedBy?: string | null, kind?: string | null): DecisionState | null {
  if (!status) return null;
  const who = WHO[kind || resolverKind(resolvedBy)] ?? "";
  switch (status) {
    case "pending":
      return { key: "pending", label: "pending", tone: "warn", title: "Waiting for a decision" };
    case "approved":
      return { key: `approved-${who || "unknown"}`, label: who ? `approved by ${who}` : "approved", tone: "ok", title: resolvedBy ? `Approved by ${resolvedBy}` : "Approved" };
    case "denied":
      return { key: `denied-${who || "unknown"}`, label: who ? `denied by ${who}` : "denied", tone: "bad", title: resolvedBy ? `Denied by ${resolvedBy}` : "Denied" };
    case "timeout":
      return { key: "timeout", label: "refused: timed out", tone: "bad", title: "Nobody decided in time: the call was refused" };
    default:
      return { key: status, label: status.replace(/_/g, " "), tone: "muted", title: status };
  }
}

// ---- filters ------------------------------------------------------------------------------------------

export const OUTCOMES = ["approved", "denied", "timeout"] as const;
export const RESOLVERS = [
  ["human", "human"],
  ["supervisor", "supervisor"],
  ["mem7", "precedent (mem7)"],
  ["system", "system (timeout, stop)"],
] as const;
export const RANGES = [
  ["", "any time"],
  ["1h", "last hour"],
  ["24h", "last 24 hours"],
  ["7d", "last 7 days"],
  ["30d", "last 30 days"],
  ["custom", "between…"],
] as const;
export const PAGE_SIZES = [25, 50, 100, 200] as const;

const RANGE_MS: Record<string, number> = { "1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000, "30d": 30 * 86_400_000 };

export interface DecisionFilters {
  agent: string;
  tool: string;
  outcome: string;
  resolver: string;
  range: string;
  /** datetime-local values (the operator's time zone), for range "custom" */
  from: string;
  to: string;
  trace: string;
  page: number; // 1-based
  size: number;
}

export const EMPTY_FILTERS: DecisionFilters = { agent: "", tool: "", outcome: "", resolver: "", range: "", from: "", to: "", trace: "", page: 1, size: 50 };

const oneOf = (v: string | null, allowed: readonly string[]) => (v && allowed.includes(v) ? v : "");

/** Filters from the page's URL; anything unknown falls back to "no filter" (the URL may be hand-edited). */
export function filtersFromQuery(q: URLSearchParams): DecisionFilters {
  const page = Number(q.get("page") ?? "1");
  const size = Number(q.get("size") ?? "50");
  return {
    agent: (q.get("agent") ?? "").trim(),
    tool: (q.get("tool") ?? "").trim(),
    outcome: oneOf(q.get("outcome"), OUTCOMES),
    resolver: oneOf(
      q.get("resolver"),
      RESOLVERS.map((r) => r[0]),
    ),
    range: oneOf(
      q.get("range"),
      RANGES.map((r) => r[0]),
    ),
    from: q.get("from") ?? "",
    to: q.get("to") ?? "",
    trace: (q.get("trace") ?? "").trim(),
    page: Number.isInteger(page) && page >= 1 ? page : 1,
    size: (PAGE_SIZES as readonly number[]).includes(size) ? size : 50,
  };
}

/** The URL query of some filters (defaults left out, so a clean URL means "everything"). */
export function filtersToQuery(f: DecisionFilters): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of ["agent", "tool", "outcome", "resolver", "range", "trace"] as const) if (f[k]) out[k] = f[k];
  if (f.range === "custom") {
    if (f.from) out.from = f.from;
    if (f.to) out.to = f.to;
  }
  if (f.page > 1) out.page = String(f.page);
  if (f.size !== 50) out.size = String(f.size);
  return out;
}

/** What is wrong with the filters, or "" (checked before asking the server, which checks again). */
export function filterProblem(f: DecisionFilters): string {
  for (const [what, value] of [["agent", f.agent], ["tool", f.tool]] as const) {
    const bad = globProblem(value.trim());
    if (bad) return `The ${what} filter is not a valid glob: ${bad}.`;
  }
  if (f.range !== "custom") return "";
  const from = f.from ? new Date(f.from).getTime() : null;
  const to = f.to ? new Date(f.to).getTime() : null;
  if (from !== null && Number.isNaN(from)) return "The start of the range is not a date.";
  if (to !== null && Number.isNaN(to)) return "The end of the range is not a date.";
  if (from !== null && to !== null && to <= from) return "The end of the range must be after its start.";
  return "";
}

/** GET /approvals/decisions parameters; `now` (ms) fixes what "last hour" means. */
export function decisionParams(f: DecisionFilters, now: number = Date.now()): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of ["agent", "tool", "outcome", "resolver", "trace"] as const) if (f[k]) out[k] = f[k];
  const span = RANGE_MS[f.range];
  if (span) out.since = new Date(now - span).toISOString();
  if (f.range === "custom") {
    if (f.from) out.since = new Date(f.from).toISOString();
    if (f.to) out.until = new Date(f.to).toISOString();
  }
  out.limit = String(f.size);
  out.offset = String((f.page - 1) * f.size);
  return out;
}

/** "21–40 of 95" and whether there is a page before and after. */
export function pageInfo(page: number, size: number, total: number): { first: number; last: number; pages: number; hasPrev: boolean; hasNext: boolean } {
  const pages = Math.max(1, Math.ceil(total / size));
  const first = total === 0 ? 0 : (page - 1) * size + 1;
  const last = Math.min(total, page * size);
  return { first, last, pages, hasPrev: page > 1, hasNext: page * size < total };
}
