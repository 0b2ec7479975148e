// The governance engine's routes (docs/governance.md): catalog, agent detail, graph, impact, versions, diffs,
// drafts and replay. Shapes follow the REST reference there.
import { useQuery } from "@tanstack/react-query";
import { mesh, seg } from "./client";
import { POLL } from "./queries";

export type Verdict = "pass" | "warn" | "fail" | "";
export type Severity = "info" | "low" | "medium" | "high" | "critical";
export type Lifecycle = "proposed" | "active" | "suspended" | "retired";

export interface Scores {
  capability: number;
  behaviour: number;
  hygiene: number;
}

export interface CatalogEntry {
  id: string;
  name: string;
  owner: string;
  team: string;
  purpose: string;
  environment: string;
  model: string;
  tools: string[];
  upstreams: string[];
  sub_agents: string[];
  data_classes: string[];
  autonomy: string;
  lifecycle: string;
  source_file: string;
}

export interface CatalogAgent extends CatalogEntry {
  state: Lifecycle;
  verdict: Verdict;
  scores: Scores | null;
  /** a glob entry: the agents it describes (each scored as itself, listed under `covered`) */
  covers?: string[];
}

/** An agent a glob entry describes (`batch-nightly` under `batch-*`). */
export interface CoveredAgent {
  id: string;
  entry: string;
  state: Lifecycle;
  name: string;
  owner: string;
  team: string;
  verdict: Verdict;
  scores: Scores | null;
}

export interface DiscoveredAgent {
  id: string;
  discovered: true;
  flag: string;
  verdict: Verdict;
  scores: Scores | null;
}

export interface CatalogListing {
  agents: CatalogAgent[];
  /** absent from servers before it was added */
  covered?: CoveredAgent[];
  discovered: DiscoveredAgent[];
  error: string;
}

export interface Finding {
  rule: string;
  severity: Severity;
  base_severity: Severity;
  occurrences: number;
  message: string;
  remediation: string;
  evidence: string[];
  first_seen: string;
  last_seen: string;
}

export interface Transition {
  from: string;
  to: string;
  at: number;
  by: string;
  reason: string;
}

/** What POST /governance/catalog/{id}/lifecycle answers. */
export interface TransitionDone {
  id: string;
  from: string;
  state: string;
  at: number;
  by: string;
  reason: string;
}

export interface ScorePoint extends Scores {
  at: string;
  verdict: Verdict;
}

export interface AgentDetail {
  agent: string;
  declared: boolean;
  entry: CatalogEntry | null;
  state: string;
  lifecycle: Transition[];
  verdict: Verdict;
  findings: Finding[];
  scores: Scores | null;
  evidence: Record<string, Record<string, unknown>> | null;
  history: ScorePoint[];
}

export type NodeType = "agent" | "tool" | "upstream";

export interface GraphNode {
  id: string;
  type: NodeType;
  label: string;
  declared?: boolean;
  discovered?: boolean;
  state?: string;
  glob?: boolean;
}

export interface GraphEdge {
  source: string;
  target: string;
  kind: "declared" | "inferred" | "served_by";
  calls?: number;
  errors?: number;
  error_rate?: number;
  last_seen?: string;
}

export interface Graph {
  nodes: GraphNode[];
  edges: GraphEdge[];
}

export interface Impact {
  kind: NodeType;
  name: string;
  days: number;
  calls: number;
  sessions: number;
  tools: { tool: string; calls: number; sessions?: number }[];
  agents: { agent: string; calls: number; sessions: number; tools?: string[] }[];
  declared_by?: string[];
  dependants?: string[];
}

export type VersionKind = "policy" | "catalog" | "tool";

export interface VersionName {
  kind: VersionKind;
  name: string;
  versions: number;
  at: number;
}

export interface Version {
  kind: VersionKind;
  name: string;
  version: number;
  sha256: string;
  at: number;
  by: string;
  removed: boolean;
}

export type ChangeClass = "breaking" | "expanding" | "neutral";

export interface Change {
  class: ChangeClass;
  kind: string;
  subject: string;
  detail: string;
  affected_agents: string[];
}

export interface Diff {
  kind: VersionKind;
  name: string;
  from: number;
  to: number;
  changes: Change[];
  summary: Record<ChangeClass, number>;
  text_diff: string;
}

export interface Draft {
  name: string;
  files: Record<string, string | null>;
  created_at: string;
  created_by: string;
  applied_at: string;
}

export interface ReplayGroup {
  agent: string;
  tool: string;
  from: string;
  to: string;
  rule_before: string;
  rule_after: string;
  count: number;
  trace_ids: string[];
}

export interface ReplayChange {
  trace_id: string;
  agent: string;
  tool: string;
  timestamp: string;
  recorded: string;
  from: string;
  to: string;
  rule_before: string;
  rule_after: string;
}

export interface Replay {
  days: number;
  calls: number;
  changed: number;
  transitions: Record<string, number>;
  groups: ReplayGroup[];
  changes: ReplayChange[];
  elapsed_ms: number;
  draft: string;
  files: string[];
}

const arr = <T,>(v: T[] | null | undefined): T[] => (Array.isArray(v) ? v : []);

export const useCatalog = () =>
  useQuery({
    queryKey: ["governance", "catalog"],
    queryFn: ({ signal }) => mesh.get<CatalogListing>("/governance/catalog", undefined, signal),
    refetchInterval: POLL.catalog,
  });

export const useGovAgent = (id: string) =>
  useQuery({
    queryKey: ["governance", "agent", id],
    queryFn: ({ signal }) => mesh.get<AgentDetail>(`/governance/agents/${seg(id)}`, { history: 200 }, signal),
    refetchInterval: POLL.catalog,
  });

export const useGraph = (days: number) =>
  useQuery({
    queryKey: ["governance", "graph", days],
    queryFn: ({ signal }) => mesh.get<Graph>("/governance/graph", { days }, signal),
    refetchInterval: false, // a refetch would re-lay the graph under the operator's hand; the page has a button
  });

export const useImpact = (kind: string, name: string, days: number) =>
  useQuery({
    queryKey: ["governance", "impact", kind, name, days],
    queryFn: ({ signal }) => mesh.get<Impact>("/governance/impact", { kind, name, days }, signal),
    enabled: !!kind && !!name,
    refetchInterval: false,
  });

export const useVersionNames = (kind: VersionKind) =>
  useQuery({
    queryKey: ["governance", "versions", kind],
    queryFn: ({ signal }) => mesh.get<VersionName[] | null>("/governance/versions", { kind }, signal).then(arr),
    refetchInterval: POLL.catalog,
  });

export const useVersionHistory = (kind: VersionKind, name: string) =>
  useQuery({
    queryKey: ["governance", "versions", kind, name],
    queryFn: ({ signal }) => mesh.get<Version[] | null>(`/governance/versions/${seg(kind)}/${seg(name)}`, undefined, signal).then(arr),
    enabled: !!name,
    refetchInterval: POLL.catalog,
  });

export const useDiff = (kind: VersionKind, name: string, from: number | null, to: number | null) =>
  useQuery({
    queryKey: ["governance", "diff", kind, name, from, to],
    queryFn: ({ signal }) => mesh.get<Diff>("/governance/diff", { kind, name, old: from, new: to }, signal),
    enabled: !!name && from !== null && to !== null,
    refetchInterval: false,
    retry: false,
  });

export const useDrafts = () =>
  useQuery({
    queryKey: ["governance", "drafts"],
    queryFn: ({ signal }) => mesh.get<Draft[] | null>("/governance/drafts", undefined, signal).then(arr),
    refetchInterval: POLL.catalog,
  });
