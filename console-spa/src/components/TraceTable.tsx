import { Fragment, useState } from "react";
import type { TraceEntry } from "../api/types";
import { callOutcome } from "../lib/outcome";
import { isControlPlaneEvent } from "../lib/people";
import { Link, pathSeg } from "../router";
import { Badge, DecisionBadge, Params, Resolver, Time, TraceLink } from "./bits";

/** An intent the mesh wrote before calling the upstream and never completed: status_code 0 (in flight, or the
 * server stopped during the call). The call may have run; what it returned is not known. */
export function outcomeUnknown(t: TraceEntry): boolean {
  return t.status_code === 0;
}

/** The approval state a trace shows, if any: its approval's outcome, a precedent's auto-approval (rule
 * supervisor:mem7), or a call still waiting (202 with an approval id). */
export function traceDecision(t: TraceEntry): { status: string; by?: string } | null {
  if (t.approval_status) return { status: t.approval_status, by: t.approved_by };
  if (t.policy === "allow" && t.policy_rule === "supervisor:mem7") return { status: "approved", by: "supervisor:mem7" };
  if (t.approval_id && t.policy === "human_approval" && t.status_code === 202) return { status: "pending" };
  return null;
}

/** The outcome badges of a trace. With an approval decision, that decision is the badge: a policy "allow" or
 * "human approval" beside it would only repeat it (or, beside a timeout, contradict it). A forwarded call that
 * failed (its upstream's 500, its arguments' 400) says so beside the policy that let it through. */
export function TraceOutcome({ t }: { t: TraceEntry }) {
  const d = traceDecision(t);
  const showPolicy = !d || (t.policy !== "allow" && t.policy !== "human_approval");
  const failed = callOutcome(t); // the policy let it through; the call itself failed
  return (
    <>
      {showPolicy ? <Badge value={t.policy} /> : null}
      {d ? <>{showPolicy ? " " : null}<DecisionBadge status={d.status} by={d.by} /></> : null}
      {failed ? (
        <>
          {" "}
          <span className="badge badge-bad" data-outcome={failed.key} title={failed.title}>
            {failed.label}
          </span>
        </>
      ) : null}
      {outcomeUnknown(t) ? <> <Badge value="outcome_unknown" title={UNKNOWN_TITLE} /></> : null}
    </>
  );
}

const UNKNOWN_TITLE = "The call was authorised and may have reached its upstream; no outcome was recorded (still in flight, or the server stopped during it).";

/** Trace entries, newest first, each expandable to its params and approval outcome. */
export function TraceTable({ traces, hideAgent, caption, compact }: { traces: TraceEntry[]; hideAgent?: boolean; caption?: string; compact?: boolean }) {
  const [open, setOpen] = useState<string | null>(null);
  const cols = 5 + (hideAgent ? 0 : 1) + (compact ? 0 : 3);
  return (
    <div className="table-wrap">
      <table className="stack">
        {caption ? <caption className="sr-only">{caption}</caption> : null}
        <thead>
          <tr>
            <th scope="col">When</th>
            {hideAgent ? null : <th scope="col">Agent</th>}
            <th scope="col">Tool</th>
            <th scope="col">Outcome</th>
            {compact ? null : (
              <>
                <th scope="col" className="hide-narrow">Rule</th>
                <th scope="col" className="hide-narrow num">Status</th>
                <th scope="col" className="hide-narrow num">ms</th>
              </>
            )}
            <th scope="col">Trace</th>
            <th scope="col"><span className="sr-only">Details</span></th>
          </tr>
        </thead>
        <tbody>
          {traces.map((t, i) => {
            const key = `${t.trace_id}:${t.revision ?? 0}:${i}`;
            const isOpen = open === key;
            return (
              <Fragment key={key}>
                <tr className={t.error ? "row-error" : undefined}>
                  <td data-label="When"><Time ts={t.timestamp} /></td>
                  {hideAgent ? null : (
                    <td data-label="Agent"><AgentOrActor t={t} /></td>
                  )}
                  <td data-label="Tool" className="mono">{t.tool}</td>
                  <td data-label="Outcome"><TraceOutcome t={t} /></td>
                  {compact ? null : (
                    <>
                      <td className="hide-narrow mono small">{t.policy_rule}</td>
                      <td className="hide-narrow num">{outcomeUnknown(t) ? "–" : t.status_code ?? ""}</td>
                      <td className="hide-narrow num">{t.latency_ms ?? ""}</td>
                    </>
                  )}
                  <td data-label="Trace"><TraceLink id={t.trace_id} /></td>
                  <td data-label="">
                    <button type="button" className="link-button" aria-expanded={isOpen} onClick={() => setOpen(isOpen ? null : key)}>
                      {isOpen ? "Hide" : "Details"}
                    </button>
                  </td>
                </tr>
                {isOpen ? (
                  <tr className="row-detail">
                    <td colSpan={cols}>
                      <TraceDetail t={t} />
                    </td>
                  </tr>
                ) : null}
              </Fragment>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

/** Who a trace entry is about: the agent that called (and the user it called for), or, for a control-plane
 *  event, the operator who acted (`by user:alice`): operators are never shown as agents. */
export function AgentOrActor({ t }: { t: TraceEntry }) {
  if (isControlPlaneEvent(t)) {
    return <span className="actor" data-actor={t.user_id || t.agent_id}>by {t.user_id || t.agent_id || "the server"}</span>;
  }
  // A control-plane event about an agent (an approval settled, a grant) names its actor in user_id; an agent's
  // own call names there the user it called for (a JWT's user claim).
  const event = t.tool.startsWith("mesh.");
  return (
    <span>
      <Link to={`/agents/${pathSeg(t.agent_id)}`}>{t.agent_id}</Link>
      {t.user_id ? <span className="muted small">{event ? " · by " : " for "}{t.user_id}</span> : null}
      {t.approved_by && !event ? <span className="muted small"> · approved by {t.approved_by}</span> : null}
    </span>
  );
}

export function TraceDetail({ t, full }: { t: TraceEntry; full?: boolean }) {
  return (
    <div className="trace-detail">
      <dl className="facts">
        {full ? (
          <>
            <dt>When</dt>
            <dd><Time ts={t.timestamp} /> <span className="muted small">{t.timestamp}</span></dd>
            <dt>Agent</dt>
            <dd><AgentOrActor t={t} /></dd>
            <dt>Tool</dt>
            <dd className="mono">{t.tool}</dd>
            <dt>Outcome</dt>
            <dd>
              <TraceOutcome t={t} />{" "}
              <span className="muted small">HTTP {outcomeUnknown(t) ? "–" : t.status_code ?? "–"}, {t.latency_ms ?? "–"} ms{t.exit_code != null ? `, exit ${t.exit_code}` : ""}</span>
            </dd>
          </>
        ) : null}
        {outcomeUnknown(t) ? (
          <>
            <dt>Outcome</dt>
            <dd className="text-warn">Unknown: {UNKNOWN_TITLE}</dd>
          </>
        ) : null}
        <dt>Trace</dt>
        <dd className="mono">{t.trace_id}</dd>
        <dt>Rule</dt>
        <dd className="mono">{t.policy_rule || "–"}</dd>
        {t.session_id ? (
          <>
            <dt>Session</dt>
            <dd><Link to={`/sessions/${pathSeg(t.session_id)}`} className="mono">{t.session_id}</Link></dd>
          </>
        ) : null}
        {t.error ? (
          <>
            <dt>Error</dt>
            <dd className="text-bad">{t.error}</dd>
          </>
        ) : null}
        {t.approval_id ? (
          <>
            <dt>Decision</dt>
            <dd>
              <Link to={`/approvals/${pathSeg(t.approval_id)}`} className="mono decision-link">{t.approval_id.slice(0, 8)}</Link>{" "}
              {t.approval_status ? <DecisionBadge status={t.approval_status} by={t.approved_by} /> : null} {t.approved_by ? <Resolver by={t.approved_by} /> : null}
              {t.approval_ms != null ? <span className="muted"> after {Math.round(t.approval_ms / 1000)}s</span> : null}
            </dd>
          </>
        ) : t.policy_rule === "supervisor:mem7" ? (
          <>
            <dt>Decision</dt>
            <dd>
              <DecisionBadge status="approved" by="supervisor:mem7" />{" "}
              <Link to="/decisions" query={{ trace: t.trace_id }} className="decision-link">the precedent decision</Link>
            </dd>
          </>
        ) : null}
        {t.supervisor_reasoning ? (
          <>
            <dt>Reasoning</dt>
            <dd>
              {t.supervisor_reasoning}
              {t.supervisor_confidence != null ? <span className="muted"> (confidence {t.supervisor_confidence})</span> : null}
            </dd>
          </>
        ) : null}
        {t.grant_id ? (
          <>
            <dt>Grant</dt>
            <dd className="mono">{t.grant_id}</dd>
          </>
        ) : null}
        {t.parent_trace_id ? (
          <>
            <dt>Parent</dt>
            <dd><TraceLink id={t.parent_trace_id} /></dd>
          </>
        ) : null}
        {t.estimated_input_tokens || t.estimated_output_tokens ? (
          <>
            <dt>Tokens</dt>
            <dd>
              {t.estimated_input_tokens ?? 0} in / {t.estimated_output_tokens ?? 0} out{" "}
              <span className="muted">({t.tokens_source ?? "estimate"})</span>
            </dd>
          </>
        ) : null}
      </dl>
      <h3 className="h-small">Params</h3>
      <Params value={t.params} />
    </div>
  );
}
