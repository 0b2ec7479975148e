import { useCallback, useEffect, useState } from "react";
import { CONSOLE_BY, useAction } from "../api/actions";
import { useWho } from "../api/people";
import { ApiError, mesh, seg } from "../api/client";
import { useApproval, useApprovalPrecedents, useApprovals, useApprovalSettings, usePrecedents } from "../api/queries";
import type { ApprovalPrecedents, ApprovalSettingsValues, ApprovalView } from "../api/types";
import { Countdown, DecisionBadge, Params, Resolver, Section, Time, TraceLink } from "../components/bits";
import { CallArguments, DiffView } from "../components/CallArguments";
import { ErrorNote, QueryState } from "../components/states";
import { TraceTable } from "../components/TraceTable";
import { decideState, fourEyes, mayWrite } from "../lib/people";
import { precedentCounts } from "../lib/precedents";
import { Link, navigate, pathSeg, useLocation } from "../router";
import { DecisionsView } from "./Decisions";
import { DeliveriesSection } from "./Deliveries";

const TABS = [
  ["pending", "Pending"],
  ["history", "History"],
  ["precedents", "Precedents"],
  ["settings", "Settings"],
] as const;

/** Views of one page as links (each has its own URL), marked with aria-current rather than ARIA tabs. */
export function Tabs({ tabs, current, base }: { tabs: readonly (readonly [string, string])[]; current: string; base: string }) {
  return (
    <nav className="tabs" aria-label="Views">
      {tabs.map(([id, label]) => (
        <a key={id} aria-current={current === id ? "page" : undefined} href={`#${base}?tab=${id}`} className={current === id ? "tab tab-on" : "tab"}>
          {label}
        </a>
      ))}
    </nav>
  );
}

export function ApprovalsPage() {
  const loc = useLocation();
  const tab = loc.query.get("tab") ?? "pending";
  return (
    <>
      <h1>Approvals</h1>
      <Tabs tabs={TABS} current={tab} base="/approvals" />
      {tab === "history" ? (
        <History />
      ) : tab === "precedents" ? (
        <PrecedentsView />
      ) : tab === "settings" ? (
        <>
          <SettingsView />
          <DeliveriesSection />
        </>
      ) : (
        <Pending />
      )}
    </>
  );
}

/** Approve or deny with an optional reasoning; the mesh records it on the trace. */
/** `suggested`: the decision an email link pre-selected (`#/approvals/<id>?decision=approve|deny`, docs/approvals.md
 * "Email"); it only focuses that button, the person still confirms. `blind`: the arguments are not open yet. */
export function ResolveForm({ id, compact, onDone, suggested, blind }: { id: string; compact?: boolean; onDone?: () => void; suggested?: string | null; blind?: boolean }) {
  const [reasoning, setReasoning] = useState("");
  const act = useAction(
    (decision: "approve" | "deny") => mesh.post<{ status: string; id: string; approvals?: number; required_approvals?: number }>(`/approvals/${seg(id)}/${decision}`, reasoning.trim() ? { reasoning: reasoning.trim() } : {}),
    [["approvals"], ["approval"], ["traces"], ["health"]],
    () => {
      setReasoning("");
      onDone?.();
    },
  );
  const err = act.error;
  return (
    <form
      className={compact ? "resolve resolve-compact" : "resolve"}
      aria-label={`Decide approval ${id.slice(0, 8)}`}
      onSubmit={(e) => {
        // Enter in the reasoning field submits, as in any form: with its first button, Approve.
        e.preventDefault();
        if (!act.isPending && !blind) act.mutate("approve");
      }}
    >
      <label className={compact ? "sr-only" : undefined} htmlFor={`reason-${id}`}>
        Reasoning (optional, recorded on the trace)
      </label>
      {compact ? (
        <input id={`reason-${id}`} placeholder="reasoning (optional)" value={reasoning} onChange={(e) => setReasoning(e.target.value)} />
      ) : (
        <textarea
          id={`reason-${id}`}
          rows={3}
          value={reasoning}
          aria-describedby={`reason-help-${id}`}
          onChange={(e) => setReasoning(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
              e.preventDefault();
              e.currentTarget.form?.requestSubmit();
            }
          }}
        />
      )}
      {compact ? null : (
        <span className="help" id={`reason-help-${id}`}>
          Ctrl+Enter approves.
        </span>
      )}
      {suggested === "approve" || suggested === "deny" ? (
        <p className="note">
          You followed the email link to {suggested} this call. Check it, then press {suggested === "approve" ? "Approve" : "Deny"} to confirm.
        </p>
      ) : null}
      <div className="row">
        <button type="submit" className="btn btn-ok" disabled={act.isPending || blind} autoFocus={suggested === "approve"} title={blind ? "Open the arguments first: nobody approves blind" : undefined}>
          Approve
        </button>
        <button type="button" className="btn btn-bad" disabled={act.isPending} autoFocus={suggested === "deny"} onClick={() => act.mutate("deny")}>
          Deny
        </button>
      </div>
      {err ? (
        err instanceof ApiError && err.status === 409 ? (
          <p className="note note-warn" role="alert">Someone resolved this approval already.</p>
        ) : (
          <ErrorNote error={err} />
        )
      ) : act.data ? (
        <p className="note note-ok" role="status">
          {act.data.status === "approved"
            ? "Approved."
            : act.data.status === "pending"
              ? `Approved: ${act.data.approvals ?? 1} of ${act.data.required_approvals ?? 2}, waiting for another approver.`
              : "Denied."}
        </p>
      ) : null}
    </form>
  );
}

export function PendingTable({ items, fetchedAt }: { items: ApprovalView[]; fetchedAt: number }) {
  return (
    <div className="table-wrap">
      <table className="stack pending">
        <thead>
          <tr>
            <th scope="col">Approval</th>
            <th scope="col">Agent</th>
            <th scope="col">Tool</th>
            <th scope="col">Arguments</th>
            <th scope="col" className="hide-narrow">Rule</th>
            <th scope="col">Left</th>
            <th scope="col">Decide</th>
          </tr>
        </thead>
        <tbody>
          {items.map((a) => (
            <PendingRow key={a.id} a={a} fetchedAt={fetchedAt} />
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** One pending call: its arguments inline (and its diff), how far a four-eyes approval is, and the decision
 *  for those who may take it; Approve waits until the arguments are open. */
function PendingRow({ a, fetchedAt }: { a: ApprovalView; fetchedAt: number }) {
  const who = useWho();
  const [seen, setSeen] = useState(false);
  const markSeen = useCallback(() => setSeen(true), []);
  const decide = decideState(who, a);
  const eyes = fourEyes(a);
  return (
    <tr data-approval={a.id}>
      <td data-label="Approval">
        <div>
          <Link to={`/approvals/${pathSeg(a.id)}`} className="mono">{a.id.slice(0, 8)}</Link> <DecisionBadge status={a.status} />
          {a.injection_risk ? <> <span className="badge badge-bad" title="the params look like a prompt injection">injection risk</span></> : null}
          <div className="muted small"><Time ts={a.created_at} /></div>
          {eyes ? <div className="four-eyes small" data-four-eyes={`${a.approvals?.length ?? 0}/${a.required_approvals}`}>{eyes}</div> : null}
        </div>
      </td>
      <td data-label="Agent">
        <div>
          <Link to={`/agents/${pathSeg(a.agent_id)}`}>{a.agent_id}</Link>
          {a.requester_user ? <div className="muted small">for {a.requester_user}</div> : null}
        </div>
      </td>
      <td data-label="Tool" className="mono">{a.tool}</td>
      <td data-label="Arguments" className="args-cell"><CallArguments a={a} onSeen={markSeen} /></td>
      <td data-label="Rule" className="hide-narrow mono small">{a.policy_rule}</td>
      <td data-label="Left"><Countdown remaining={a.remaining} fetchedAt={fetchedAt} /></td>
      <td data-label="Decide">
        {decide.may ? <ResolveForm id={a.id} compact blind={!seen} /> : <span className="muted small not-yours" data-not-yours="">{decide.why}</span>}
      </td>
    </tr>
  );
}

function Pending() {
  const q = useApprovals("pending");
  return (
    <Section title="Waiting for a decision">
      <QueryState query={q} what="pending approvals" isEmpty={(d) => d.length === 0} empty="Nothing is waiting. Calls that a policy sends to human_approval appear here within 3 seconds.">
        {(items) => <PendingTable items={items} fetchedAt={q.dataUpdatedAt} />}
      </QueryState>
    </Section>
  );
}

function History() {
  return <DecisionsView base="/approvals" fixed={{ tab: "history" }} />;
}

function PrecedentsView() {
  const q = usePrecedents();
  const writes = mayWrite(useWho());
  const forget = useAction(
    (p: { tool: string; agent: string }) => mesh.post<{ result: unknown }>("/approvals/precedents/forget", p),
    [["precedents"]],
  );
  return (
    <Section title="Precedents from memory">
      <p className="muted">
        Past human decisions per tool and agent. With auto-approve on, a read tool with enough human approvals and no
        refusal is approved without asking. Forget erases that history for one pair.
      </p>
      {forget.error ? (
        forget.error instanceof ApiError && forget.error.status === 409 ? (
          <p className="note note-warn" role="alert">Auto-approve is off, so there is nothing to forget.</p>
        ) : (
          <ErrorNote error={forget.error} />
        )
      ) : forget.data ? (
        <p className="note note-ok" role="status">Forgotten.</p>
      ) : null}
      <QueryState query={q} what="precedents" isEmpty={(d) => !d.enabled || d.precedents.length === 0} empty={q.data && !q.data.enabled ? `Precedents are off: ${q.data.reason ?? "auto-approve is disabled"}.` : "No precedent yet: decisions appear here after humans resolve approvals."}>
        {(d) => (
          <>
            <p className="small">Auto-approve after {d.min_approvals ?? "?"} human approvals.</p>
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Tool</th>
                    <th scope="col">Agent</th>
                    <th scope="col" className="num">Human ✓</th>
                    <th scope="col" className="num hide-narrow">Other ✓</th>
                    <th scope="col" className="num">Refused</th>
                    <th scope="col" className="num hide-narrow">Untagged</th>
                    <th scope="col">Auto</th>
                    <th scope="col">Last</th>
                    <th scope="col"><span className="sr-only">Actions</span></th>
                  </tr>
                </thead>
                <tbody>
                  {d.precedents.map((p) => (
                    <tr key={`${p.tool}\u0000${p.agent}`}>
                      <td data-label="Tool" className="mono">{p.tool}</td>
                      <td data-label="Agent">{p.agent}</td>
                      <td data-label="Human ✓" className="num">{p.human_approved}</td>
                      <td data-label="Other ✓" className="num hide-narrow">{p.other_approved}</td>
                      <td data-label="Refused" className="num">{p.refused}</td>
                      <td data-label="Untagged" className="num hide-narrow">{p.untagged}</td>
                      <td data-label="Auto">
                        {p.would_auto_approve ? <span className="badge badge-ok" title="the next call would be auto-approved">next call</span> : p.auto_approvable ? <span className="muted small">eligible</span> : <span className="muted small">no</span>}
                      </td>
                      <td data-label="Last"><Time ts={p.last} /></td>
                      <td data-label="">
                        {writes ? <button
                          type="button"
                          className="btn btn-small btn-danger"
                          disabled={forget.isPending}
                          onClick={() => {
                            if (window.confirm(`Forget the decisions for ${p.tool} by ${p.agent}? The next calls ask a human again until new approvals count.`))
                              forget.mutate({ tool: p.tool, agent: p.agent });
                          }}
                        >
                          Forget
                        </button> : null}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </>
        )}
      </QueryState>
    </Section>
  );
}

const SETTING_FIELDS: { key: keyof ApprovalSettingsValues; label: string; kind: "number" | "bool"; help: string }[] = [
  { key: "timeout_seconds", label: "Timeout (seconds)", kind: "number", help: "An approval not decided by then is denied." },
  { key: "wait_seconds", label: "MCP wait (seconds)", kind: "number", help: "How long an MCP call waits for an automatic decision." },
  { key: "auto_approve", label: "Auto-approve from precedents", kind: "bool", help: "Approve calls that humans approved before." },
  { key: "min_approvals", label: "Human approvals needed", kind: "number", help: "Precedents needed before auto-approving." },
  { key: "auto_approve_writes", label: "Auto-approve write tools too", kind: "bool", help: "Otherwise only read tools." },
];

function SettingsView() {
  const q = useApprovalSettings();
  const writes = mayWrite(useWho());
  const [form, setForm] = useState<ApprovalSettingsValues | null>(null);
  useEffect(() => {
    if (q.data && form === null) setForm({ ...q.data.settings });
  }, [q.data, form]);
  const save = useAction(
    (v: ApprovalSettingsValues) => {
      // Only the editable keys go back; GET may carry more than PUT accepts.
      const body: Record<string, unknown> = { by: CONSOLE_BY };
      for (const f of SETTING_FIELDS) if (v[f.key] !== undefined) body[f.key] = v[f.key];
      return mesh.put<{ changed: string[]; backup?: string }>("/approvals/settings", body);
    },
    [["approval-settings"], ["precedents"]],
  );
  const editable = q.data?.editable !== false && writes;
  return (
    <Section title="Approval settings">
      <QueryState query={q} what="approval settings">
        {() =>
          form ? (
            <form
              className="form"
              onSubmit={(e) => {
                e.preventDefault();
                save.mutate(form);
              }}
            >
              {!writes ? <p className="note note-warn">Only an admin or an owner changes these settings.</p> : !editable ? <p className="note note-warn">These settings are read-only on this server (set in config.yaml).</p> : null}
              {SETTING_FIELDS.map((f) => (
                <div key={f.key} className="field">
                  {f.kind === "bool" ? (
                    <label className="check">
                      <input type="checkbox" disabled={!editable} checked={!!form[f.key]} onChange={(e) => setForm({ ...form, [f.key]: e.target.checked })} />
                      {f.label}
                    </label>
                  ) : (
                    <>
                      <label htmlFor={`set-${f.key}`}>{f.label}</label>
                      <input
                        id={`set-${f.key}`}
                        type="number"
                        min={0}
                        disabled={!editable}
                        value={form[f.key] === undefined ? "" : String(form[f.key])}
                        onChange={(e) => setForm({ ...form, [f.key]: e.target.value === "" ? undefined : Number(e.target.value) })}
                      />
                    </>
                  )}
                  <span className="help">{f.help}</span>
                </div>
              ))}
              <div className="row">
                <button type="submit" className="btn" disabled={!editable || save.isPending}>Save</button>
                <button type="button" className="btn btn-ghost" onClick={() => { setForm(null); void q.refetch(); }}>
                  Reload
                </button>
              </div>
              {save.error ? (
                save.error instanceof ApiError && save.error.status === 501 ? (
                  <p className="note note-warn" role="alert">Editing approval settings is not available on this server.</p>
                ) : (
                  <ErrorNote error={save.error} />
                )
              ) : save.data ? (
                <p className="note note-ok" role="status">
                  Saved{save.data.changed.length ? `: ${save.data.changed.join(", ")}` : " (nothing changed)"}.
                  {save.data.backup ? ` Backup: ${save.data.backup}` : ""}
                </p>
              ) : null}
            </form>
          ) : null
        }
      </QueryState>
    </Section>
  );
}

export function ApprovalDetailPage({ id }: { id: string }) {
  const q = useApproval(id);
  const suggested = useLocation().query.get("decision");
  const who = useWho();
  return (
    <>
      <p><Link to="/approvals">← Approvals</Link></p>
      <h1>Approval <span className="mono">{id.slice(0, 8)}</span></h1>
      <QueryState query={q} what="the approval">
        {(a) => (
          <>
            {a.injection_risk ? (
              <div className="note note-error" role="alert">
                <strong>Injection risk.</strong> The params contain text that tries to steer a reviewer (for example
                “ignore previous instructions” or “pre-approved”). Read them before approving.
              </div>
            ) : null}
            <div className="grid-2">
              <Section title="Request">
                <dl className="facts">
                  <dt>Status</dt>
                  <dd><DecisionBadge status={a.status} by={a.resolved_by} kind={a.resolver_kind} /> {a.status === "pending" ? <Countdown remaining={a.remaining} fetchedAt={q.dataUpdatedAt} /> : null}</dd>
                  <dt>Agent</dt>
                  <dd><Link to={`/agents/${pathSeg(a.agent_id)}`}>{a.agent_id}</Link></dd>
                  <dt>Tool</dt>
                  <dd className="mono">{a.tool}</dd>
                  <dt>Rule</dt>
                  <dd className="mono">{a.policy_rule}</dd>
                  <dt>Trace</dt>
                  <dd><TraceLink id={a.trace_id} /></dd>
                  <dt>Created</dt>
                  <dd><Time ts={a.created_at} /></dd>
                  {fourEyes(a) ? (
                    <>
                      <dt>Four eyes</dt>
                      <dd className="four-eyes">{fourEyes(a)}</dd>
                    </>
                  ) : null}
                  {a.requester_user ? (
                    <>
                      <dt>On behalf of</dt>
                      <dd>{a.requester_user}</dd>
                    </>
                  ) : null}
                  <dt>Id</dt>
                  <dd className="mono small">{a.id}</dd>
                  {a.resolved_by ? (
                    <>
                      <dt>Resolved by</dt>
                      <dd><Resolver by={a.resolved_by} kind={a.resolver_kind} />{a.resolved_note ? <span className="muted small"> (said: {a.resolved_note})</span> : null} <Time ts={a.resolved_at} /></dd>
                    </>
                  ) : null}
                  {a.reasoning ? (
                    <>
                      <dt>Reasoning</dt>
                      <dd>{a.reasoning}{a.confidence != null ? <span className="muted"> (confidence {a.confidence})</span> : null}</dd>
                    </>
                  ) : null}
                </dl>
              </Section>
              <Section title="Decide">
                {a.status === "pending" ? (
                  ((d) => (d.may ? <ResolveForm id={a.id} suggested={suggested} /> : <p className="muted not-yours">{d.why}</p>))(decideState(who, a))
                ) : (
                  <p className="muted">This approval is {a.status}; nothing to decide.</p>
                )}
              </Section>
            </div>
            <Section title="Params">
              <Params value={a.params} />
            </Section>
            {a.preview?.kind === "diff" && typeof a.preview.diff === "string" ? (
              <Section title="What the call would change">
                <DiffView path={a.preview.path} diff={a.preview.diff} />
              </Section>
            ) : null}
            <ApprovalPrecedentsSection id={a.id} pending={a.status === "pending"} />
            <Section title="Active grants for this agent">
              {a.active_grants?.length ? (
                <ul className="plain">
                  {a.active_grants.map((g) => (
                    <li key={g.id}>
                      <span className="mono">{g.tools}</span> for <span className="mono">{g.agent}</span>, {g.remaining} left{" "}
                      <span className="muted">(by {g.granted_by})</span>
                    </li>
                  ))}
                </ul>
              ) : (
                <p className="muted">None. <Link to="/grants">Create a grant</Link> to let this agent use a tool without asking for a while.</p>
              )}
            </Section>
            <Section title="The agent's recent calls">
              {a.recent_traces?.length ? <TraceTable traces={a.recent_traces} hideAgent /> : <p className="muted">No earlier calls.</p>}
            </Section>
          </>
        )}
      </QueryState>
      {q.error instanceof ApiError && q.error.status === 404 ? (
        <p><button type="button" className="btn" onClick={() => navigate("/approvals")}>Back to the list</button></p>
      ) : null}
    </>
  );
}

/** Beside an approval: past decisions of the same tool and agent, and what the precedent rule would do now. */
function ApprovalPrecedentsSection({ id, pending }: { id: string; pending: boolean }) {
  const q = useApprovalPrecedents(id);
  return (
    <Section title="Precedents: earlier decisions of this tool for this agent" id="precedents-title">
      {q.error instanceof ApiError && q.error.status === 501 ? (
        <p className="muted">Precedents are not available on this server.</p>
      ) : (
        <QueryState query={q} what="the precedents">
          {(p) => <PrecedentsBody p={p} pending={pending} />}
        </QueryState>
      )}
    </Section>
  );
}

/** A resolver that classifies as `kind`, for a memory-only fact that names its kind and not its resolver. */
const resolverOfKind = (kind: string) => ({ mem7: "supervisor:mem7", supervisor: "supervisor:", system: "system:", human: "human" })[kind] ?? "";

export function PrecedentsBody({ p, pending }: { p: ApprovalPrecedents; pending: boolean }) {
  const r = p.rule;
  const counts = precedentCounts(p); // as the rows below count them
  return (
    <>
      <div className={`note ${r.would_auto_approve ? "note-ok" : "note-warn"} precedent-rule`} role="status">
        <strong>
          {r.would_auto_approve
            ? `The precedent rule would auto-approve ${pending ? "this call" : "the same call"} now.`
            : `The precedent rule would not auto-approve ${pending ? "this call" : "the same call"} now.`}
        </strong>{" "}
        {r.reasons.join("; ")}.
        <span className="muted small">
          {" "}
          Human approvals counted: {counts.approvals} of {r.min_approvals}; refusals: <span data-refusals={counts.refusals}>{counts.refusals}</span>
          {r.reset_at ? <>; forgotten <Time ts={r.reset_at} /></> : null}.
        </span>
      </div>
      {p.memory_error ? <p className="note note-warn">Memory could not be read: {p.memory_error}. The list below shows this deployment's own decisions.</p> : null}
      {p.decisions.length === 0 ? (
        <p className="muted">No earlier decision of <span className="mono">{p.tool}</span> for {p.agent}.</p>
      ) : (
        <div className="table-wrap">
          <table className="stack precedents">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Outcome</th>
                <th scope="col">By</th>
                <th scope="col">Counts?</th>
                <th scope="col">Approval</th>
                <th scope="col">Call</th>
              </tr>
            </thead>
            <tbody>
              {p.decisions.map((d, i) => (
                <tr key={`${d.approval_id}:${i}`}>
                  <td data-label="When"><Time ts={d.resolved_at} /></td>
                  <td data-label="Outcome"><DecisionBadge status={d.status} by={d.resolved_by || resolverOfKind(d.kind)} kind={d.kind} /></td>
                  <td data-label="By">
                    {d.resolved_by ? <Resolver by={d.resolved_by} kind={d.kind} /> : <span className={`tag tag-${d.kind || "unknown"}`}>{d.kind || "untagged"}</span>}
                    {d.source === "memory" ? <span className="muted small"> (memory only{d.signed ? ", signed" : ", unsigned"})</span> : null}
                  </td>
                  <td data-label="Counts?" className="small">{d.counts ? <span className="badge badge-ok">counts</span> : <span className="muted">{d.note}</span>}</td>
                  <td data-label="Approval">{d.source === "ledger" ? <Link to={`/approvals/${pathSeg(d.approval_id)}`} className="mono">{d.approval_id.slice(0, 8)}</Link> : <span className="mono muted">{d.approval_id.slice(0, 8) || "–"}</span>}</td>
                  <td data-label="Call"><TraceLink id={d.trace_id} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
