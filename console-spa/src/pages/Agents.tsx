import { useState } from "react";
import { CONSOLE_BY, useAction } from "../api/actions";
import { ApiError, mesh, seg } from "../api/client";
import { useWrites } from "../api/people";
import { usePolicies, useToolDecisions, useTraces } from "../api/queries";
import { Badge, Section, Time } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { TraceTable } from "../components/TraceTable";
import { agentRights, cellKey, observedMatrix, summarizeAgents, type Observed } from "../lib/rights";
import { Link, pathSeg } from "../router";

function Cell({ o }: { o: Observed | undefined }) {
  if (!o) return <td className="cell cell-none"><span className="sr-only">not used</span></td>;
  const cls = o.last.startsWith("allow") || o.last === "human_approval:approved" ? "ok" : o.last.startsWith("human_approval") ? "warn" : "bad";
  return (
    <td className={`cell cell-${cls}`} title={`${o.total} calls: ${o.allowed} allowed, ${o.denied} denied, ${o.approval} approval; last ${o.last}`}>
      {o.total}
    </td>
  );
}

export function AgentsPage() {
  const q = useTraces({ limit: 1000 });
  const policies = usePolicies();
  return (
    <>
      <h1>Agents</h1>
      <QueryState query={q} what="traces" isEmpty={(d) => d.length === 0} empty="No agent has called a tool yet. Agents appear here after their first traced call.">
        {(d) => {
          const agents = summarizeAgents(d);
          const m = observedMatrix(d);
          return (
            <>
              <Section title="Agents seen in the last 1000 calls">
                <div className="table-wrap">
                  <table className="stack">
                    <thead>
                      <tr>
                        <th scope="col">Agent</th>
                        <th scope="col" className="num">Calls</th>
                        <th scope="col" className="num">Allowed</th>
                        <th scope="col" className="num">Denied</th>
                        <th scope="col" className="num">Approval</th>
                        <th scope="col" className="hide-narrow">Policy</th>
                        <th scope="col">Last call</th>
                      </tr>
                    </thead>
                    <tbody>
                      {agents.map((a) => (
                        <tr key={a.agent}>
                          <td data-label="Agent"><Link to={`/agents/${pathSeg(a.agent)}`}>{a.agent}</Link></td>
                          <td data-label="Calls" className="num">{a.total}</td>
                          <td data-label="Allowed" className="num">{a.allowed}</td>
                          <td data-label="Denied" className="num">{a.denied}</td>
                          <td data-label="Approval" className="num">{a.approval}</td>
                          <td data-label="Policy" className="hide-narrow small">{(policies.data ?? []).filter((p) => p.agent === a.agent).map((p) => p.name).join(", ") || <span className="muted">by glob</span>}</td>
                          <td data-label="Last call"><Time ts={a.lastAt} /></td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              </Section>
              <Section title="Observed rights: agents × tools">
                <p className="muted small">Each cell counts calls; its colour is the latest outcome (green allowed, amber waiting for approval, red denied). Hover for the breakdown.</p>
                <div className="table-wrap">
                  <table className="matrix">
                    <thead>
                      <tr>
                        <th scope="col">Agent</th>
                        {m.tools.map((t) => (
                          <th key={t} scope="col" className="matrix-tool"><span>{t}</span></th>
                        ))}
                      </tr>
                    </thead>
                    <tbody>
                      {m.agents.map((a) => (
                        <tr key={a}>
                          <th scope="row"><Link to={`/agents/${pathSeg(a)}`}>{a}</Link></th>
                          {m.tools.map((t) => (
                            <Cell key={t} o={m.cells.get(cellKey(a, t))} />
                          ))}
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              </Section>
            </>
          );
        }}
      </QueryState>
    </>
  );
}

const EDIT_ACTIONS = ["allow", "human_approval", "deny", "inherit"] as const;

function ActionEditor({ agent, tool, current }: { agent: string; tool: string; current: string }) {
  const [value, setValue] = useState("");
  const writes = useWrites();
  const save = useAction(
    (action: string) => mesh.put<unknown>(`/policies/${seg(agent)}/tools/${seg(tool)}`, { action, by: CONSOLE_BY }),
    [["tool-decisions"], ["policies"]],
    () => setValue(""),
  );
  const err = save.error;
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        if (value) save.mutate(value);
      }}
    >
      <label className="sr-only" htmlFor={`act-${tool}`}>Set the action of {tool}</label>
      <select id={`act-${tool}`} value={value} onChange={(e) => setValue(e.target.value)}>
        <option value="">change…</option>
        {EDIT_ACTIONS.filter((a) => a !== current).map((a) => (
          <option key={a} value={a}>{a.replace("_", " ")}</option>
        ))}
      </select>
      <button type="submit" className="btn btn-small" disabled={!value || save.isPending || !writes}>Set</button>
      {err ? (
        err instanceof ApiError && err.status === 409 ? (
          <span className="text-bad small" role="alert"> A hand-written rule decides this; edit the YAML on the Policies page.</span>
        ) : err instanceof ApiError && err.status === 501 ? (
          <span className="text-bad small" role="alert"> Policy editing is off on this server.</span>
        ) : (
          <span className="text-bad small" role="alert"> {err.message}</span>
        )
      ) : save.isSuccess ? (
        <span className="text-ok small" role="status"> saved</span>
      ) : null}
    </form>
  );
}

export function AgentDetailPage({ id }: { id: string }) {
  const decisions = useToolDecisions(id);
  const traces = useTraces({ agent: id, limit: 200 });
  const rows = agentRights(id, decisions.data ?? [], traces.data ?? []);
  return (
    <>
      <p><Link to="/agents">← Agents</Link></p>
      <h1>Agent <span className="mono">{id}</span></h1>
      <p>
        <Link to="/traces" query={{ agent: id }}>Traces</Link> · <Link to="/otel" query={{ agent: id }}>Waterfall</Link> ·{" "}
        <Link to="/grants" query={{ agent: id }}>Grant a tool</Link>
      </p>
      <Section title="Effective rights">
        <p className="muted small">
          “Policy” is what the next call with no arguments would get (GET /tools/decisions); “seen” is what the last 200
          traced calls got. Changing an action writes an exact rule into this agent's policy file.
        </p>
        {decisions.isError ? <ErrorNote error={decisions.error} what="the policy decisions" /> : null}
        {traces.isError ? <ErrorNote error={traces.error} what="traces" /> : null}
        {decisions.isPending || traces.isPending ? (
          <p className="muted" role="status">Loading…</p>
        ) : rows.length === 0 ? (
          <p className="note note-empty">No tool is registered and this agent has made no call.</p>
        ) : (
          <div className="table-wrap">
            <table className="stack">
              <thead>
                <tr>
                  <th scope="col">Tool</th>
                  <th scope="col">Policy</th>
                  <th scope="col" className="hide-narrow">Rule</th>
                  <th scope="col" className="hide-narrow">Access</th>
                  <th scope="col">Seen</th>
                  <th scope="col">Change</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r) => (
                  <tr key={r.tool}>
                    <td data-label="Tool" className="mono">{r.tool}</td>
                    <td data-label="Policy">
                      {r.decision ? <Badge value={r.decision.action} /> : <span className="muted small">not in catalog</span>}
                      {r.decision?.conditional?.length ? (
                        <div className="small muted">
                          {r.decision.conditional.map((c, i) => (
                            <div key={i}>if {c.field} {c.operator}: {c.action.replace("_", " ")}</div>
                          ))}
                        </div>
                      ) : null}
                    </td>
                    <td data-label="Rule" className="hide-narrow mono small">{r.decision?.rule}{r.decision?.source_file ? <div className="muted">{r.decision.source_file}</div> : null}</td>
                    <td data-label="Access" className="hide-narrow">{r.decision?.classification ? <span className="tag">{r.decision.classification.access}</span> : null}</td>
                    <td data-label="Seen" className="small">
                      {r.observed.total ? (
                        <span title={`${r.observed.allowed} allowed, ${r.observed.denied} denied or limited, ${r.observed.approval} sent to approval`}>
                          {r.observed.total} call{r.observed.total === 1 ? "" : "s"}, last <Badge value={r.observed.last} />
                        </span>
                      ) : (
                        <span className="muted">never</span>
                      )}
                    </td>
                    <td data-label="Change">{r.decision ? <ActionEditor agent={id} tool={r.tool} current={r.decision.action} /> : null}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Section>
      <Section title="Recent calls">
        <QueryState query={traces} what="traces" isEmpty={(d) => d.length === 0} empty="This agent has made no traced call.">
          {(d) => <TraceTable traces={d.slice(0, 50)} hideAgent />}
        </QueryState>
      </Section>
    </>
  );
}
