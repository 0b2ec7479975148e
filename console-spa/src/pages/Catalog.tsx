// The agent catalog (declared and discovered agents with their verdicts) and one agent's governance detail:
// catalog metadata, lifecycle with its history and transitions, the three scores over time, findings.
import { useState, type ReactNode } from "react";
import { CONSOLE_BY, useAction } from "../api/actions";
import { useWrites } from "../api/people";
import { mesh, seg } from "../api/client";
import { useCatalog, useGovAgent, type AgentDetail, type Finding, type TransitionDone } from "../api/governance";
import { Kpi, Section, Time, TraceLink } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { ScoreChart } from "../components/ScoreChart";
import { bySeverity, catalogRows, filterRows, nextStates, severityTone, verdictTone, type CatalogFilter } from "../lib/governance";
import { Link, navigate, parseHash, pathSeg, useLocation } from "../router";

export function VerdictBadge({ verdict }: { verdict: string }) {
  if (!verdict) return <span className="badge badge-muted" data-verdict="none">not scored</span>;
  return (
    <span className={`badge badge-${verdictTone(verdict)}`} data-verdict={verdict}>
      {verdict}
    </span>
  );
}

export function StateBadge({ state }: { state: string }) {
  const tone = state === "active" ? "ok" : state === "suspended" || state === "discovered" ? "bad" : state === "proposed" ? "warn" : "muted";
  return <span className={`badge badge-${tone}`} data-state={state}>{state}</span>;
}

const FILTER_KEYS = ["verdict", "state", "who", "origin"] as const;

export function CatalogPage() {
  const loc = useLocation();
  const q = useCatalog();
  const f: CatalogFilter = Object.fromEntries(FILTER_KEYS.map((k) => [k, loc.query.get(k) ?? ""]));
  // From the hash itself, not this render: two changes in one tick must both land.
  const set = (k: (typeof FILTER_KEYS)[number], v: string) => {
    const now = parseHash(window.location.hash).query;
    navigate("/catalog", { ...Object.fromEntries(FILTER_KEYS.map((x) => [x, now.get(x) ?? ""])), [k]: v });
  };
  return (
    <>
      <h1>Catalog</h1>
      <p className="muted small">
        Agents declared in <code>catalog_dir</code> with their lifecycle and latest verdict, each agent a glob entry covers (under its entry,
        with its own verdict), and agents seen in the trace (last 30 days) that no entry declares. Verdicts come from the latest evaluation.
      </p>
      <form className="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filter the catalog">
        <div className="field">
          <label htmlFor="f-verdict">Verdict</label>
          <select id="f-verdict" value={f.verdict} onChange={(e) => set("verdict", e.target.value)}>
            <option value="">any</option>
            <option value="fail">fail</option>
            <option value="warn">warn</option>
            <option value="pass">pass</option>
            <option value="none">not scored</option>
          </select>
        </div>
        <div className="field">
          <label htmlFor="f-state">Lifecycle</label>
          <select id="f-state" value={f.state} onChange={(e) => set("state", e.target.value)}>
            <option value="">any</option>
            {["proposed", "active", "suspended", "retired", "discovered"].map((s) => (
              <option key={s} value={s}>{s}</option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="f-origin">Declared</label>
          <select id="f-origin" value={f.origin} onChange={(e) => set("origin", e.target.value)}>
            <option value="">declared and discovered</option>
            <option value="declared">declared only</option>
            <option value="covered">covered by a glob entry</option>
            <option value="discovered">discovered only</option>
          </select>
        </div>
        <div className="field">
          <label htmlFor="f-who">Owner or team</label>
          <input id="f-who" value={f.who} placeholder="alice, pets…" onChange={(e) => set("who", e.target.value)} />
        </div>
      </form>
      <QueryState query={q} what="the catalog">
        {(d) => {
          const all = catalogRows(d);
          const rows = filterRows(all, f);
          const discovered = all.filter((r) => r.origin === "discovered").length;
          const covered = all.filter((r) => r.origin === "covered").length;
          return (
            <>
              {d.error ? (
                <div className="note note-error" role="alert">
                  <strong>The catalog files do not load; the last good catalog is shown.</strong> {d.error}
                </div>
              ) : null}
              <div className="kpis">
                <Kpi label="declared entries" value={all.length - discovered - covered} />
                <Kpi label="covered by a glob entry" value={covered} to="/catalog?origin=covered" />
                <Kpi label="discovered (not declared)" value={discovered} tone={discovered ? "bad" : "ok"} to="/catalog?origin=discovered" />
                <Kpi label="fail" value={all.filter((r) => r.verdict === "fail").length} tone="bad" to="/catalog?verdict=fail" />
                <Kpi label="warn" value={all.filter((r) => r.verdict === "warn").length} tone="warn" to="/catalog?verdict=warn" />
              </div>
              <Section title={`Agents (${rows.length} of ${all.length})`}>
                {rows.length === 0 ? (
                  <p className="note note-empty">{all.length ? "No agent matches these filters." : "No agent is declared and none has called a tool yet."}</p>
                ) : (
                  <div className="table-wrap">
                    <table className="stack catalog-table">
                      <thead>
                        <tr>
                          <th scope="col">Agent</th>
                          <th scope="col">Verdict</th>
                          <th scope="col">Lifecycle</th>
                          <th scope="col">Owner</th>
                          <th scope="col">Team</th>
                          <th scope="col" className="num">Capability</th>
                          <th scope="col" className="num">Behaviour</th>
                          <th scope="col" className="num">Hygiene</th>
                          <th scope="col" className="hide-narrow">Declared tools</th>
                        </tr>
                      </thead>
                      <tbody>
                        {rows.map((r) => (
                          <tr key={`${r.origin}:${r.id}`} data-agent={r.id} data-origin={r.origin} className={r.origin === "discovered" ? "row-flagged" : r.origin === "covered" ? "row-covered" : ""}>
                            <td data-label="Agent">
                              {r.covers ? (
                                <span className="mono" title="a glob entry: each agent it covers has its own row">{r.id}</span>
                              ) : (
                                <Link to={`/catalog/${pathSeg(r.id)}`} className="mono">{r.id}</Link>
                              )}
                              {r.name ? <div className="small muted">{r.name}</div> : null}
                              {r.origin === "covered" ? <div className="small muted">under <span className="mono">{r.entry}</span></div> : null}
                              {!r.declared ? (
                                <div>
                                  <span className="badge badge-bad" title={r.flag}>⚑ discovered</span>
                                </div>
                              ) : null}
                            </td>
                            <td data-label="Verdict">
                              {r.covers ? (
                                <span className="badge badge-muted" data-verdict="glob" title="a glob entry has no verdict of its own: its agents have theirs">
                                  covers {r.covers.length} {r.covers.length === 1 ? "agent" : "agents"}
                                </span>
                              ) : (
                                <VerdictBadge verdict={r.verdict} />
                              )}
                            </td>
                            <td data-label="Lifecycle"><StateBadge state={r.state} /></td>
                            <td data-label="Owner">{r.owner || <span className="muted">–</span>}</td>
                            <td data-label="Team">{r.team || <span className="muted">–</span>}</td>
                            <td data-label="Capability" className="num">{r.scores?.capability ?? "–"}</td>
                            <td data-label="Behaviour" className="num">{r.scores?.behaviour ?? "–"}</td>
                            <td data-label="Hygiene" className="num">{r.scores?.hygiene ?? "–"}</td>
                            <td data-label="Declared tools" className="hide-narrow mono small tool-names">
                              {r.origin === "discovered" ? <span className="muted">not declared</span> : r.origin === "covered" ? <span className="muted">as {r.entry}</span> : r.tools.join(", ")}
                            </td>
                          </tr>
                        ))}
                      </tbody>
                    </table>
                  </div>
                )}
              </Section>
            </>
          );
        }}
      </QueryState>
    </>
  );
}

const iso = (at: number) => new Date(at * 1000).toISOString();

function Lifecycle({ detail }: { detail: AgentDetail }) {
  const entry = detail.entry;
  const [state, setState] = useState("");
  const [reason, setReason] = useState("");
  const writes = useWrites();
  const move = useAction(
    (v: { state: string; reason: string }) => mesh.post<TransitionDone>(`/governance/catalog/${seg(entry!.id)}/lifecycle`, { ...v, by: CONSOLE_BY }),
    [["governance"]],
    () => {
      setState("");
      setReason("");
    },
  );
  const history = [...detail.lifecycle].reverse();
  const moves = nextStates(detail.state);
  return (
    <Section title="Lifecycle" id="lifecycle">
      <p>
        State <StateBadge state={detail.state} />
        {entry && entry.id !== detail.agent ? <span className="muted small"> (from the entry <code>{entry.id}</code>)</span> : null}
        {detail.state === "suspended" || detail.state === "retired" ? <span className="small text-bad"> — every call of this agent is refused before any policy.</span> : null}
      </p>
      {entry ? (
        moves.length ? (
          <form
            className="inline-form"
            aria-label="Change the lifecycle"
            onSubmit={(e) => {
              e.preventDefault();
              if (state && reason.trim()) move.mutate({ state, reason: reason.trim() });
            }}
          >
            <label htmlFor="lc-state">Move to</label>
            <select id="lc-state" value={state} onChange={(e) => setState(e.target.value)}>
              <option value="">choose…</option>
              {moves.map((s) => (
                <option key={s} value={s}>{s}</option>
              ))}
            </select>
            <label htmlFor="lc-reason" className="sr-only">Reason</label>
            <input id="lc-reason" placeholder="why (required)" value={reason} onChange={(e) => setReason(e.target.value)} required />
            <button type="submit" className={`btn btn-small ${state === "suspended" || state === "retired" ? "btn-bad" : ""}`} disabled={!state || !reason.trim() || move.isPending || !writes}>
              {move.isPending ? "Saving…" : "Apply"}
            </button>
          </form>
        ) : (
          <p className="muted small">Retired is final.</p>
        )
      ) : (
        <p className="muted small">Not declared: declare it in the catalog to give it a lifecycle.</p>
      )}
      {move.error ? <ErrorNote error={move.error} /> : null}
      {move.data ? (
        <p className="note note-ok" role="status">
          {move.data.id}: {move.data.from} → {move.data.state}.
        </p>
      ) : null}
      <h3 className="h-small">Transitions</h3>
      {history.length ? (
        <div className="table-wrap">
          <table className="stack lifecycle-history">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Change</th>
                <th scope="col">By</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {history.map((t, i) => (
                <tr key={i}>
                  <td data-label="When"><Time ts={iso(t.at)} /></td>
                  <td data-label="Change">{t.from} → <strong>{t.to}</strong></td>
                  <td data-label="By">{t.by}</td>
                  <td data-label="Why">{t.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <p className="muted small">No transition recorded{entry?.lifecycle ? `: the state is the entry's declared ${entry.lifecycle}` : ""}.</p>
      )}
    </Section>
  );
}

function FindingRow({ f }: { f: Finding }) {
  const escalated = f.severity !== f.base_severity;
  return (
    <li className="finding" data-rule={f.rule}>
      <div className="row">
        <span className={`badge badge-${severityTone(f.severity)}`} data-severity={f.severity}>{f.severity}</span>
        <strong className="mono">{f.rule}</strong>
        {escalated ? <span className="small muted">escalated from {f.base_severity}</span> : null}
        <span className="small muted">seen {f.occurrences}×, since <Time ts={f.first_seen} /></span>
      </div>
      <p>{f.message}</p>
      <p className="small"><strong>Fix:</strong> {f.remediation}</p>
      {f.evidence.length ? (
        <p className="small evidence">
          Evidence:{" "}
          {f.evidence.map((t) => (
            <span key={t}>
              <TraceLink id={t} />{" "}
            </span>
          ))}
        </p>
      ) : (
        <p className="small muted">No trace behind it (a fact of the catalog or the policy).</p>
      )}
    </li>
  );
}

function Facts({ detail }: { detail: AgentDetail }) {
  const e = detail.entry;
  if (!e)
    return (
      <div className="note note-warn" role="note">
        <strong>⚑ Discovered:</strong> this agent calls tools but no catalog entry declares it. Declare it with an owner, its tools and upstreams.
      </div>
    );
  const list = (xs: string[]) => (xs.length ? xs.join(", ") : <span className="muted">–</span>);
  const rows: [string, ReactNode][] = [
    ["Entry", <code>{e.id}</code>],
    ["Name", e.name || <span className="muted">–</span>],
    ["Owner", e.owner || <span className="text-bad">no owner</span>],
    ["Team", e.team || <span className="muted">–</span>],
    ["Purpose", e.purpose || <span className="muted">–</span>],
    ["Environment", e.environment || <span className="muted">–</span>],
    ["Model", e.model || <span className="muted">–</span>],
    ["Autonomy", e.autonomy || <span className="muted">–</span>],
    ["Tools", <span className="mono">{list(e.tools)}</span>],
    ["Upstreams", <span className="mono">{list(e.upstreams)}</span>],
    ["Sub-agents", <span className="mono">{list(e.sub_agents)}</span>],
    ["Data classes", list(e.data_classes)],
    ["File", <span className="mono small">{e.source_file}</span>],
  ];
  return (
    <dl className="facts">
      {rows.map(([k, v]) => (
        <div key={k} style={{ display: "contents" }}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

export function GovAgentPage({ id }: { id: string }) {
  const q = useGovAgent(id);
  return (
    <>
      <p className="small"><Link to="/catalog">← Catalog</Link></p>
      <h1>
        <span className="mono">{id}</span> {q.data ? <VerdictBadge verdict={q.data.verdict} /> : null}
      </h1>
      <QueryState query={q} what={`agent ${id}`}>
        {(d) => (
          <>
            <p className="small">
              <Link to={`/agents/${pathSeg(id)}`}>Its calls and rights</Link> · <Link to="/traces" query={{ agent: id }}>Its traces</Link> ·{" "}
              <Link to="/graph" query={{ node: `agent:${id}` }}>Its place in the graph</Link>
            </p>
            <div className="detail-grid">
              <Section title="Catalog entry">
                <Facts detail={d} />
              </Section>
              <Lifecycle detail={d} />
            </div>
            <Section title="Scores">
              {d.scores ? (
                <div className="kpis">
                  <Kpi label="capability (power without a human)" value={d.scores.capability} tone={d.scores.capability >= 70 ? "warn" : "plain"} />
                  <Kpi label="behaviour (100 = clean)" value={d.scores.behaviour} tone={d.scores.behaviour < 60 ? "bad" : "ok"} />
                  <Kpi label="hygiene (100 = clean)" value={d.scores.hygiene} tone={d.scores.hygiene < 60 ? "bad" : "ok"} />
                </div>
              ) : (
                <p className="muted">Not scored yet.</p>
              )}
              <ScoreChart history={d.history} />
              {d.evidence ? (
                <details>
                  <summary>The evidence behind the scores</summary>
                  <pre className="code small">{JSON.stringify(d.evidence, null, 2)}</pre>
                </details>
              ) : null}
            </Section>
            <Section title={`Findings (${d.findings.length})`}>
              {d.findings.length ? (
                <ul className="findings">
                  {bySeverity(d.findings).map((f) => (
                    <FindingRow key={f.rule} f={f} />
                  ))}
                </ul>
              ) : (
                <p className="muted">No open finding.</p>
              )}
            </Section>
          </>
        )}
      </QueryState>
    </>
  );
}

