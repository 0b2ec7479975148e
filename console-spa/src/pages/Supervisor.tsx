import { useAction } from "../api/actions";
import { supervisor } from "../api/client";
import { useSupervisorDecisions, useSupervisorStatus } from "../api/queries";
import { Badge, Kpi, Section, Time } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { Link, pathSeg } from "../router";
import { supervisorBase, useSettings } from "../settings";

function uptime(s: number): string {
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : `${m}m ${Math.floor(s % 60)}s`;
}

export function SupervisorPage() {
  const settings = useSettings();
  const base = supervisorBase(settings);
  const status = useSupervisorStatus(!!base);
  const decisions = useSupervisorDecisions(!!base);
  const toggle = useAction((action: "pause" | "resume") => supervisor.post<unknown>(`/${action}`), [["sup7-status"]]);
  if (!base) {
    return (
      <>
        <h1>Supervisor</h1>
        <Section title="Not configured">
          <p>
            The supervisor (sup7) is a separate process that reviews pending approvals with rules and an LLM before a human
            sees them. This page talks to its admin API directly, so the console needs its address:
          </p>
          <ol>
            <li>
              In the supervisor's config, enable the admin API with a token:
              <pre className="code">{"admin:\n  enabled: true\n  token: <a long random string>"}</pre>
            </li>
            <li>Restart the supervisor.</li>
            <li>
              Enter its URL (for example <code>http://localhost:9096</code>) and token in <Link to="/settings">Settings</Link>.
            </li>
          </ol>
          <p className="muted small">The browser calls the supervisor itself, so it must accept this page's origin (CORS).</p>
        </Section>
      </>
    );
  }
  return (
    <>
      <h1>Supervisor</h1>
      <QueryState query={status} what="the supervisor's status">
        {(s) => (
          <>
            <div className="kpis">
              <Kpi label={`state · ${s.version}`} value={<Badge value={s.state} />} />
              <Kpi label="uptime" value={uptime(s.uptime_s)} />
              <Kpi label="approved" value={s.decisions.approved} tone="ok" />
              <Kpi label="denied" value={s.decisions.denied} tone="bad" />
              <Kpi label="escalated to a human" value={s.decisions.escalated} tone="warn" />
            </div>
            <Section
              title="Control"
              actions={
                s.state === "paused" ? (
                  <button type="button" className="btn btn-ok" disabled={toggle.isPending} onClick={() => toggle.mutate("resume")}>Resume reviewing</button>
                ) : (
                  <button type="button" className="btn btn-bad" disabled={toggle.isPending} onClick={() => toggle.mutate("pause")}>Pause reviewing</button>
                )
              }
            >
              {toggle.error ? <ErrorNote error={toggle.error} /> : null}
              <dl className="facts">
                <dt>Mesh</dt>
                <dd>
                  <span className="mono">{s.mesh.url}</span> {s.mesh.reachable ? <Badge value="ok" /> : <Badge value="error" title="the supervisor cannot reach the mesh" />}
                </dd>
                <dt>Memory</dt>
                <dd>{s.memory.enabled ? "decisions are stored in memory" : "off"}</dd>
                <dt>Evaluator</dt>
                <dd>{s.evaluator.mode === "chain" ? "a chain of providers, first healthy one answers" : "a single provider"}</dd>
                <dt>Last decision</dt>
                <dd><Time ts={s.decisions.last_at ?? undefined} /></dd>
              </dl>
              {s.evaluator.providers.length ? (
                <div className="table-wrap">
                  <table className="stack">
                    <thead>
                      <tr>
                        <th scope="col">Provider</th>
                        <th scope="col">State</th>
                        <th scope="col" className="num">Failures</th>
                        <th scope="col">Detail</th>
                      </tr>
                    </thead>
                    <tbody>
                      {s.evaluator.providers.map((p) => (
                        <tr key={p.name}>
                          <td data-label="Provider">{p.name}</td>
                          <td data-label="State"><Badge value={p.state} />{p.skipped_for_s ? <span className="small muted"> {Math.round(p.skipped_for_s)}s</span> : null}</td>
                          <td data-label="Failures" className="num">{p.consecutive_failures}</td>
                          <td data-label="Detail" className="small">{p.detail}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              ) : null}
            </Section>
          </>
        )}
      </QueryState>
      <Section title="Latest decisions">
        <QueryState query={decisions} what="decisions" isEmpty={(d) => d.length === 0} empty="The supervisor has not decided anything yet.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">When</th>
                    <th scope="col">Approval</th>
                    <th scope="col">Agent</th>
                    <th scope="col">Tool</th>
                    <th scope="col">Decision</th>
                    <th scope="col" className="hide-narrow">Rule / reasoning</th>
                  </tr>
                </thead>
                <tbody>
                  {d.map((x, i) => (
                    <tr key={`${x.approval_id}-${i}`}>
                      <td data-label="When"><Time ts={x.timestamp} /></td>
                      <td data-label="Approval"><Link to={`/approvals/${pathSeg(x.approval_id)}`} className="mono">{x.approval_id.slice(0, 8)}</Link></td>
                      <td data-label="Agent">{x.agent_id}</td>
                      <td data-label="Tool" className="mono">{x.tool}</td>
                      <td data-label="Decision"><Badge value={x.decision} />{x.confidence != null ? <span className="small muted"> {x.confidence}</span> : null}</td>
                      <td data-label="Rule / reasoning" className="hide-narrow small">
                        {x.rule_matched ? <span className="mono">{x.rule_matched}</span> : null} {x.reasoning}
                        {x.evaluation_ms != null ? <span className="muted"> ({x.evaluation_ms} ms)</span> : null}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </QueryState>
      </Section>
    </>
  );
}
