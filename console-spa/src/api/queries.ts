// Every poll of the console in one place, at CONTRACT 4's intervals. Queries refetch in the background
// (never a page reload) and keep showing the last good data while a refetch is in flight.
import { useQuery } from "@tanstack/react-query";
import { getSettings, meshBase } from "../settings";
import { ApiError, mesh, seg, supervisor } from "./client";
import type {
  ApprovalDetail,
  ApprovalPrecedents,
  DecisionPage,
  Deliveries,
  ApprovalSettings,
  ApprovalView,
  GrantView,
  Halt,
  Health,
  McpServer,
  OtlpExport,
  Pin,
  Policy,
  Precedents,
  SessionSummary,
  SupervisorDecision,
  SupervisorStatus,
  Tool,
  ToolDecision,
  TraceEntry,
  TraceVerify,
  WhyChain,
} from "./types";

export const POLL = {
  health: 10_000,
  traces: 5_000,
  otel: 5_000,
  approvals: 3_000,
  sessions: 10_000,
  session: 5_000,
  catalog: 15_000,
  grants: 10_000,
  halts: 5_000,
  supervisor: 5_000,
} as const;

const arr = <T,>(v: T[] | null | undefined): T[] => (Array.isArray(v) ? v : []);

export interface TraceFilter {
  agent?: string;
  tool?: string;
  trace?: string;
  limit?: number;
}

export const useHealth = () =>
  useQuery({ queryKey: ["health"], queryFn: ({ signal }) => mesh.get<Health>("/health", undefined, signal), refetchInterval: POLL.health });

export const useTraces = (f: TraceFilter = {}) =>
  useQuery({
    queryKey: ["traces", f],
    queryFn: ({ signal }) => mesh.get<TraceEntry[] | null>("/traces", { agent: f.agent, tool: f.tool, trace: f.trace, limit: f.limit ?? 100 }, signal).then(arr),
    refetchInterval: POLL.traces,
  });

export const useTraceVerify = () =>
  useQuery({ queryKey: ["traces-verify"], queryFn: ({ signal }) => mesh.get<TraceVerify>("/traces/verify", undefined, signal), refetchInterval: 60_000 });

export const useWhy = (id: string) =>
  useQuery({
    queryKey: ["why", id],
    queryFn: ({ signal }) => mesh.get<WhyChain>(`/traces/${seg(id)}/why`, { depth: 10 }, signal),
    enabled: !!id,
    refetchInterval: POLL.traces,
  });

export const useOtel = (f: { agent?: string; tool?: string; limit?: number }) =>
  useQuery({
    queryKey: ["otel", f],
    queryFn: ({ signal }) => mesh.get<OtlpExport>("/otel-traces", { agent: f.agent, tool: f.tool, limit: f.limit ?? 200 }, signal),
    refetchInterval: POLL.otel,
  });

export const useSessions = (limit = 50) =>
  useQuery({
    queryKey: ["sessions", limit],
    queryFn: ({ signal }) => mesh.get<SessionSummary[] | null>("/sessions", { limit }, signal).then(arr),
    refetchInterval: POLL.sessions,
  });

export const useSession = (id: string, limit = 200) =>
  useQuery({
    queryKey: ["session", id, limit],
    queryFn: ({ signal }) => mesh.get<TraceEntry[] | null>(`/sessions/${seg(id)}`, { limit }, signal).then(arr),
    refetchInterval: POLL.session,
  });

export const useApprovals = (status: "pending" | "all", tool?: string) =>
  useQuery({
    queryKey: ["approvals", status, tool ?? ""],
    queryFn: ({ signal }) => mesh.get<ApprovalView[] | null>("/approvals", { status, tool }, signal).then(arr),
    refetchInterval: POLL.approvals,
  });

export const useApproval = (id: string) =>
  useQuery({
    queryKey: ["approval", id],
    queryFn: ({ signal }) => mesh.get<ApprovalDetail>(`/approvals/${seg(id)}`, undefined, signal),
    refetchInterval: POLL.approvals,
  });

/** GET /approvals/decisions: one page of settled approvals, filtered on the server. */
export const useDecisions = (params: Record<string, string>, enabled = true) =>
  useQuery({
    queryKey: ["approvals", "decisions", params],
    enabled,
    queryFn: ({ signal }) => mesh.get<DecisionPage>("/approvals/decisions", params, signal),
    refetchInterval: POLL.approvals * 2,
    placeholderData: (previous) => previous, // a new page keeps the old rows on screen until it arrives
  });

/** GET /approvals/{id}/precedents: the past decisions beside one approval, and what the precedent rule would do. */
export const useApprovalPrecedents = (id: string) =>
  useQuery({
    queryKey: ["approval", id, "precedents"],
    queryFn: ({ signal }) => mesh.get<ApprovalPrecedents>(`/approvals/${seg(id)}/precedents`, undefined, signal),
    refetchInterval: POLL.catalog,
  });

export const usePrecedents = () =>
  useQuery({ queryKey: ["precedents"], queryFn: ({ signal }) => mesh.get<Precedents>("/approvals/precedents", undefined, signal), refetchInterval: POLL.catalog });

// Not polled: a background refetch must not overwrite a form the operator is editing.
export const useApprovalSettings = () =>
  useQuery({ queryKey: ["approval-settings"], queryFn: ({ signal }) => mesh.get<ApprovalSettings>("/approvals/settings", undefined, signal), refetchInterval: false });

export const useDeliveries = () =>
  useQuery({
    queryKey: ["deliveries"],
    queryFn: ({ signal }) => mesh.get<Deliveries>("/notifications/deliveries", undefined, signal),
    refetchInterval: POLL.grants,
  });

export const useGrants = () =>
  useQuery({
    queryKey: ["grants"],
    queryFn: ({ signal }) => mesh.get<GrantView[] | null>("/grants", undefined, signal).then(arr),
    refetchInterval: POLL.grants,
  });

export const usePolicies = () =>
  useQuery({ queryKey: ["policies"], queryFn: ({ signal }) => mesh.get<Policy[] | null>("/policies", undefined, signal).then(arr), refetchInterval: POLL.catalog });

export const useTools = () =>
  useQuery({ queryKey: ["tools"], queryFn: ({ signal }) => mesh.get<Tool[] | null>("/tools", undefined, signal).then(arr), refetchInterval: POLL.catalog });

export const useToolDecisions = (agent: string) =>
  useQuery({
    queryKey: ["tool-decisions", agent],
    queryFn: ({ signal }) => mesh.get<ToolDecision[] | null>("/tools/decisions", { agent }, signal).then(arr),
    enabled: !!agent,
    refetchInterval: POLL.catalog,
  });

export const useMcpServers = () =>
  useQuery({ queryKey: ["mcp-servers"], queryFn: ({ signal }) => mesh.get<McpServer[] | null>("/mcp-servers", undefined, signal).then(arr), refetchInterval: POLL.catalog });

/** GET /tools/pins answers 501 while `pin_tools` is off: a setting, not a fault. The page says "not configured",
 *  stops polling, and the tab remembers it per server, so later visits do not ask (and the browser does not log
 *  a failed request) until someone asks to check again. */
const PINS_OFF = "flux7.console.pins-off";

export const isNotConfigured = (e: unknown) => e instanceof ApiError && e.status === 501;

export function pinningKnownOff(): boolean {
  try {
    return globalThis.sessionStorage?.getItem(PINS_OFF) === meshBase(getSettings());
  } catch {
    return false;
  }
}

export function rememberPinningOff(off: boolean): void {
  try {
    if (off) globalThis.sessionStorage?.setItem(PINS_OFF, meshBase(getSettings()));
    else globalThis.sessionStorage?.removeItem(PINS_OFF);
  } catch {
    // storage disabled: the page asks again on the next visit
  }
}

export const usePins = (enabled = true) =>
  useQuery({
    queryKey: ["pins"],
    queryFn: ({ signal }) =>
      mesh.get<Pin[] | null>("/tools/pins", undefined, signal).then(arr, (e: unknown) => {
        if (isNotConfigured(e)) rememberPinningOff(true);
        throw e;
      }),
    enabled,
    retry: false,
    refetchInterval: (q) => (isNotConfigured(q.state.error) ? false : POLL.catalog),
  });

/** GET /halts may answer a list or `{halts: [...]}`; a stop is in force until it has been resumed. */
export function normalizeHalts(body: unknown): Halt[] {
  const list = Array.isArray(body) ? body : body && typeof body === "object" && Array.isArray((body as { halts?: unknown }).halts) ? (body as { halts: Halt[] }).halts : [];
  return list as Halt[];
}

export const isActiveHalt = (h: Halt) => h.active !== false && !h.resumed_at;

/** Stops in force (the banner); `all` adds the resumed ones (the halts page, `?status=all`). */
export const useHalts = (all = false) =>
  useQuery({
    queryKey: ["halts", all ? "all" : "active"],
    queryFn: ({ signal }) => mesh.get<unknown>("/halts", all ? { status: "all" } : undefined, signal).then(normalizeHalts),
    refetchInterval: POLL.halts,
  });

export const useSupervisorStatus = (enabled: boolean) =>
  useQuery({
    queryKey: ["sup7-status"],
    queryFn: ({ signal }) => supervisor.get<SupervisorStatus>("/status", undefined, signal),
    enabled,
    refetchInterval: POLL.supervisor,
  });

export function normalizeDecisions(body: unknown): SupervisorDecision[] {
  if (Array.isArray(body)) return body as SupervisorDecision[];
  if (body && typeof body === "object" && Array.isArray((body as { decisions?: unknown }).decisions)) return (body as { decisions: SupervisorDecision[] }).decisions;
  return [];
}

export const useSupervisorDecisions = (enabled: boolean) =>
  useQuery({
    queryKey: ["sup7-decisions"],
    queryFn: ({ signal }) => supervisor.get<unknown>("/decisions", { limit: 30 }, signal).then(normalizeDecisions),
    enabled,
    refetchInterval: POLL.supervisor * 2,
  });
