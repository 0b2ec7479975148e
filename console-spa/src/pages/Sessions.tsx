import { useSession, useSessions } from "../api/queries";
import { Section, Time } from "../components/bits";
import { QueryState } from "../components/states";
import { TraceTable } from "../components/TraceTable";
import { summarizeAgents } from "../lib/rights";
import { Link, pathSeg } from "../router";

export function SessionsPage() {
  const q = useSessions(50);
  return (
    <>
      <h1>Sessions</h1>
      <Section title="Sessions, most recently active first">
        <QueryState query={q} what="sessions" isEmpty={(d) => d.length === 0} empty="No session yet. Calls carrying an X-Session-Id header (or MCP sessions) are grouped here.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Session</th>
                    <th scope="col">Agent</th>
                    <th scope="col" className="num">Events</th>
                    <th scope="col" className="hide-narrow">Tools</th>
                    <th scope="col" className="hide-narrow">Started</th>
                    <th scope="col">Last seen</th>
                  </tr>
                </thead>
                <tbody>
                  {d.map((s) => (
                    <tr key={s.session_id}>
                      <td data-label="Session"><Link to={`/sessions/${pathSeg(s.session_id)}`} className="mono" title={s.session_id}>{s.session_id.length > 16 ? `${s.session_id.slice(0, 16)}…` : s.session_id}</Link></td>
                      <td data-label="Agent"><Link to={`/agents/${pathSeg(s.agent_id)}`}>{s.agent_id}</Link></td>
                      <td data-label="Events" className="num">{s.event_count}</td>
                      <td data-label="Tools" className="hide-narrow mono small">{(s.tools ?? []).join(", ")}</td>
                      <td data-label="Started" className="hide-narrow"><Time ts={s.first_seen} /></td>
                      <td data-label="Last seen"><Time ts={s.last_seen} /></td>
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

export function SessionDetailPage({ id }: { id: string }) {
  const q = useSession(id);
  return (
    <>
      <p><Link to="/sessions">← Sessions</Link></p>
      <h1>Session <span className="mono">{id}</span></h1>
      <QueryState query={q} what="the session's calls" isEmpty={(d) => d.length === 0} empty="No call recorded for this session.">
        {(d) => {
          const agents = summarizeAgents(d);
          return (
            <>
              <div className="kpis">
                <div className="kpi"><span className="kpi-value">{d.length}</span><span className="kpi-label">calls</span></div>
                <div className="kpi kpi-ok"><span className="kpi-value">{d.filter((t) => t.policy === "allow").length}</span><span className="kpi-label">allowed</span></div>
                <div className="kpi kpi-bad"><span className="kpi-value">{d.filter((t) => t.policy === "deny" || t.policy === "halted").length}</span><span className="kpi-label">denied</span></div>
                <div className="kpi kpi-warn"><span className="kpi-value">{d.filter((t) => t.policy === "human_approval").length}</span><span className="kpi-label">approvals</span></div>
              </div>
              <p>
                Agents: {agents.map((a, i) => (
                  <span key={a.agent}>{i ? ", " : ""}<Link to={`/agents/${pathSeg(a.agent)}`}>{a.agent}</Link></span>
                ))}{" "}
                · <Link to="/otel" query={{ agent: agents[0]?.agent }}>Waterfall</Link>
              </p>
              <Section title="Calls, newest first">
                <TraceTable traces={d} />
              </Section>
            </>
          );
        }}
      </QueryState>
    </>
  );
}
