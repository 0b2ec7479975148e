// Wire shapes from CONTRACT.md (1.6–1.14, 2.5, 3). Optional fields follow Go's omitempty.

export type PolicyAction = "allow" | "deny" | "human_approval";
export type TracePolicy = PolicyAction | "rate_limited" | "halted" | "error" | string;

export interface Health {
  status: string;
  tools: number;
  traces: {
    total: number;
    allowed: number;
    denied: number;
    human_approval: number;
    errors: number;
    estimated_input_tokens?: number;
    estimated_output_tokens?: number;
  };
  version: string;
  config?: unknown;
}

export interface TraceEntry {
  trace_id: string;
  session_id?: string;
  agent_id: string;
  user_id?: string;
  tool: string;
  params: unknown;
  policy: TracePolicy;
  policy_rule?: string;
  status_code?: number;
  latency_ms?: number;
  error?: string;
  timestamp: string;
  exit_code?: number;
  grant_id?: string;
  parent_trace_id?: string;
  span_id?: string;
  parent_span_id?: string;
  approval_id?: string;
  approval_status?: string;
  approved_by?: string;
  approval_ms?: number;
  supervisor_reasoning?: string;
  supervisor_confidence?: number;
  estimated_input_tokens?: number;
  estimated_output_tokens?: number;
  tokens_source?: string;
  revision?: number;
}

export interface TraceVerify {
  persistent?: boolean;
  files?: string[];
  hmac?: boolean;
  verified_at?: string;
  lines: number;
  unchained: number;
  chained: number;
  first_seq?: number;
  last_seq?: number;
  anchor?: string;
  head?: string;
  alg?: string;
  break?: { file: string; line: number; seq?: number; reason: string } | null;
  /** Calls whose intent was written before the upstream call and whose outcome never was (not a break). */
  outcome_unknown?: number;
  outcome_unknown_calls?: { trace_id: string; seq: number; agent_id: string; tool: string; timestamp: string }[];
}

export interface WhyChain {
  trace_id: string;
  chain_length: number;
  chain: TraceEntry[];
}

export interface SessionSummary {
  session_id: string;
  agent_id: string;
  event_count: number;
  first_seen: string;
  last_seen: string;
  tools: string[] | null;
}

export type ApprovalStatus = "pending" | "approved" | "denied" | "timeout";

export interface Redacted {
  content_length: number;
  content_sha256: string;
  content_type_detected: string;
}

export interface GrantView {
  id: string;
  agent: string;
  tools: string;
  expires_at: string;
  remaining: string;
  granted_by: string;
  approval_id?: string;
  trace_id?: string;
}

export interface ApprovalView {
  id: string;
  agent_id: string;
  tool: string;
  params: unknown;
  trace_id?: string;
  policy_rule: string;
  status: ApprovalStatus;
  created_at: string;
  remaining?: string;
  resolved_by?: string;
  /** what the resolving request said of itself (its `resolved_by`); the resolver is its credential */
  resolved_note?: string;
  /** the server's classification of the resolver, once settled */
  resolver_kind?: string;
  resolved_at?: string;
  reasoning?: string;
  confidence?: number;
  injection_risk?: boolean;
  /** pending only: whether the principal asking may decide it now (their scope, their own vote, their own call) */
  actionable?: boolean;
  /** what the call would change, as its caller showed it (a file edit's diff); `{kind: "redacted"}` when hidden */
  preview?: { kind: string; path?: string; diff?: string };
  /** four eyes: how many distinct humans must approve, and who has */
  required_approvals?: number;
  approvals?: { actor: string; at: string }[];
  requester_user?: string;
}

export interface DecisionView extends ApprovalView {
  resolver_kind: "human" | "supervisor" | "mem7" | "system" | string;
  fact_key: string;
}

export interface DecisionPage {
  decisions: DecisionView[];
  total: number;
  limit: number;
  offset: number;
}

export interface PastDecision {
  approval_id: string;
  status: string;
  resolved_by: string;
  kind: string;
  resolved_at: string;
  trace_id: string;
  source: "ledger" | "memory" | string;
  in_memory: boolean;
  signed?: boolean;
  reasoning?: string;
  counts: boolean;
  note: string;
}

export interface ApprovalPrecedents {
  approval_id: string;
  tool: string;
  agent: string;
  rule: {
    would_auto_approve: boolean;
    reasons: string[];
    auto_approve: boolean;
    eligible: boolean;
    injection_risk: boolean;
    min_approvals: number;
    human_approvals: number | null;
    refusals: number;
    reset_at?: string;
  };
  decisions: PastDecision[];
  memory_error?: string;
}

export interface ApprovalDetail extends ApprovalView {
  recent_traces?: TraceEntry[];
  active_grants?: GrantView[];
}

export interface Precedent {
  tool: string;
  agent: string;
  human_approved: number;
  other_approved: number;
  refused: number;
  untagged: number;
  last?: string;
  auto_approvable: boolean;
  would_auto_approve: boolean;
}

export interface Precedents {
  enabled: boolean;
  min_approvals?: number;
  reason?: string;
  precedents: Precedent[];
}

export interface ApprovalSettingsValues {
  timeout_seconds?: number;
  wait_seconds?: number;
  auto_approve?: boolean;
  min_approvals?: number;
  auto_approve_writes?: boolean;
}

export interface ApprovalSettings {
  settings: ApprovalSettingsValues;
  config?: unknown;
  editable?: boolean;
  precedent?: unknown;
}

export interface Condition {
  field: string;
  operator: string;
  value: unknown;
}

export interface PolicyRule {
  tools: string[];
  action: PolicyAction;
  condition?: Condition;
}

export interface Policy {
  name: string;
  agent: string;
  rate_limit?: { max_per_minute?: number; max_total?: number } & Record<string, unknown>;
  rules: PolicyRule[];
  source_file?: string;
}

export interface ToolParam {
  name: string;
  in: string;
  type: string;
  required: boolean;
}

export interface Classification {
  family: "named" | "generic" | string;
  access: "read" | "write" | "unknown" | string;
  reasons: string[];
}

export interface Tool {
  name: string;
  description: string;
  method?: string;
  path?: string;
  base_url?: string;
  params: ToolParam[] | null;
  source: "openapi" | "mcp" | "cli" | string;
  mcp_server?: string;
  classification?: Classification;
}

export interface ToolDecision {
  name: string;
  source: string;
  mcp_server?: string;
  classification?: Classification;
  pin?: string;
  action: PolicyAction;
  rule: string;
  conditional: { action: string; rule: string; field: string; operator: string }[] | null;
  source_file?: string;
  rule_index: number;
}

export interface McpServer {
  name: string;
  transport: string;
  status: string;
  error?: string;
  tools: string[] | null;
}

export interface Pin {
  tool: string;
  server: string;
  status: "pinned" | "new" | "changed";
  pinned_description?: string;
  current_description: string;
  pinned_at?: string;
  fingerprint: string;
}

export interface Halt {
  id: string;
  scope: "all" | "agent" | "session";
  target?: string;
  reason?: string;
  created_by?: string;
  created_at: string;
  revoked_grants?: string[] | number;
  resumed_at?: string;
  resumed_by?: string;
  active?: boolean;
}

export interface HaltCreated {
  halt: Halt;
  revoked_grants: number;
  denied_approvals: number;
  already_active?: boolean;
}

export interface PolicyFile {
  name: string;
  text: string;
}

export interface PolicyFileSaved {
  name: string;
  reloaded: boolean;
}

export interface MemoryChain {
  holds: boolean;
  report: {
    entries: number;
    legacy: number;
    sealed: number;
    keyed: boolean | number;
    break: { file: string; line: number; entity: string; reason: string } | null;
  };
}

export interface OtlpAttribute {
  key: string;
  value: { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };
}

export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes?: OtlpAttribute[];
  status?: { code?: number; message?: string };
}

export interface OtlpExport {
  resourceSpans: { resource?: unknown; scopeSpans: { scope?: unknown; spans: OtlpSpan[] | null }[] | null }[] | null;
}

export interface SupervisorStatus {
  version: string;
  state: "running" | "paused" | string;
  uptime_s: number;
  mesh: { url: string; reachable: boolean };
  memory: { enabled: boolean };
  evaluator: {
    mode: "single" | "chain" | string;
    providers: { name: string; state: "ok" | "failing" | "skipped" | string; consecutive_failures: number; skipped_for_s: number; detail?: string }[];
  };
  decisions: { approved: number; denied: number; escalated: number; last_at?: string | null };
}

export interface SupervisorDecision {
  timestamp: string;
  approval_id: string;
  agent_id: string;
  tool: string;
  decision: "approved" | "denied" | "escalated" | string;
  rule_matched?: string;
  reasoning?: string;
  confidence?: number;
  evaluation_ms?: number;
}

/** A notification delivery still owed or given up (GET /notifications/deliveries, shared/notify/outbox.py). */
export interface Delivery {
  seq: number;
  lane: "webhook" | "slack" | "email";
  kind: string;
  approval_id: string;
  status: "queued" | "failed";
  attempts: number;
  last_error: string;
  created_at: number;
  next_attempt_at: number | null;
}

export interface Deliveries {
  lanes: Delivery["lane"][]; // the channels configured; none: notifications are off
  deliveries: Delivery[];
}
