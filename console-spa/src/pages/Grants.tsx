import { useState } from "react";
import { useAction } from "../api/actions";
import { mesh, seg } from "../api/client";
import { useWho } from "../api/people";
import { useGrants } from "../api/queries";
import type { GrantView } from "../api/types";
import { Countdown, Section, TraceLink } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { durationProblem } from "../lib/durations";
import { globProblem } from "../lib/glob";
import { mayGrant, mayWrite } from "../lib/people";
import { Link, pathSeg, useLocation } from "../router";

const PRESETS = ["15m", "1h", "4h", "24h"];

export function GrantsPage() {
  const loc = useLocation();
  const q = useGrants();
  const who = useWho();
  const [form, setForm] = useState({ agent: loc.query.get("agent") ?? "", tools: loc.query.get("tools") ?? "", duration: "1h" });
  const create = useAction((v: typeof form) => mesh.post<GrantView>("/grants", v), [["grants"]], () => setForm({ agent: "", tools: "", duration: "1h" }));
  const revoke = useAction((id: string) => mesh.del<{ status: string; id: string }>(`/grants/${seg(id)}`), [["grants"]]);
  const durationError = durationProblem(form.duration);
  const agentError = globProblem(form.agent.trim());
  const toolsError = globProblem(form.tools.trim());
  const invalid = !!(durationError || agentError || toolsError);
  return (
    <>
      <h1>Grants</h1>
      <p className="muted">
        A grant lets an agent use matching tools without asking for approval until it expires. It lifts
        <code> human_approval</code> only; a denial stays a denial.
      </p>
      {mayGrant(who) ? <Section title="Create a grant">
        <form
          className="form form-row"
          onSubmit={(e) => {
            e.preventDefault();
            if (invalid) return;
            create.mutate({ agent: form.agent.trim(), tools: form.tools.trim(), duration: form.duration.trim() });
          }}
        >
          <div className="field">
            <label htmlFor="g-agent">Agent (glob)</label>
            <input
              id="g-agent"
              required
              value={form.agent}
              aria-invalid={agentError ? true : undefined}
              aria-describedby={agentError ? "g-agent-problem" : undefined}
              onChange={(e) => setForm({ ...form, agent: e.target.value })}
              placeholder="claude or team-*"
            />
            {agentError ? <span className="field-error" id="g-agent-problem" role="alert">Not a valid glob: {agentError}.</span> : null}
          </div>
          <div className="field">
            <label htmlFor="g-tools">Tools (glob)</label>
            <input
              id="g-tools"
              required
              value={form.tools}
              aria-invalid={toolsError ? true : undefined}
              aria-describedby={toolsError ? "g-tools-problem" : undefined}
              onChange={(e) => setForm({ ...form, tools: e.target.value })}
              placeholder="github.* or fs.write_file"
            />
            {toolsError ? <span className="field-error" id="g-tools-problem" role="alert">Not a valid glob: {toolsError}.</span> : null}
          </div>
          <div className="field">
            <label htmlFor="g-duration">Duration</label>
            <input
              id="g-duration"
              required
              value={form.duration}
              aria-invalid={durationError ? true : undefined}
              aria-describedby={durationError ? "g-duration-problem g-duration-help" : "g-duration-help"}
              onChange={(e) => setForm({ ...form, duration: e.target.value })}
            />
            {durationError ? <span className="field-error" id="g-duration-problem" role="alert">{durationError}</span> : null}
            <span className="help" id="g-duration-help">
              A Go duration such as 30m or 2h.{" "}
              {PRESETS.map((p) => (
                <button key={p} type="button" className="link-button" onClick={() => setForm({ ...form, duration: p })}>
                  {p}
                </button>
              ))}
            </span>
          </div>
          <div className="row">
            <button type="submit" className="btn" disabled={create.isPending || invalid}>Grant</button>
          </div>
        </form>
        {create.error ? <ErrorNote error={create.error} /> : create.data ? (
          <p className="note note-ok" role="status">
            Granted <span className="mono">{create.data.tools}</span> to <span className="mono">{create.data.agent}</span> for {create.data.remaining}.
          </p>
        ) : null}
      </Section> : <p className="note" data-role-note="">You are a {who?.role}: approvers, admins and owners grant.</p>}
      <Section title="Active grants">
        {revoke.error ? <ErrorNote error={revoke.error} /> : null}
        <QueryState query={q} what="grants" isEmpty={(d) => d.length === 0} empty="No active grant. Grants expire on their own; revoked and expired ones are not listed.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Grant</th>
                    <th scope="col">Agent</th>
                    <th scope="col">Tools</th>
                    <th scope="col">Left</th>
                    <th scope="col" className="hide-narrow">By</th>
                    <th scope="col" className="hide-narrow">From</th>
                    <th scope="col"><span className="sr-only">Actions</span></th>
                  </tr>
                </thead>
                <tbody>
                  {d.map((g) => (
                    <tr key={g.id}>
                      <td data-label="Grant" className="mono" title={g.id}>{g.id.slice(0, 8)}</td>
                      <td data-label="Agent"><Link to={`/agents/${pathSeg(g.agent)}`} className="mono">{g.agent}</Link></td>
                      <td data-label="Tools" className="mono">{g.tools}</td>
                      <td data-label="Left"><Countdown remaining={g.remaining} fetchedAt={q.dataUpdatedAt} /></td>
                      <td data-label="By" className="hide-narrow small">{g.granted_by}</td>
                      <td data-label="From" className="hide-narrow">
                        {g.approval_id ? <Link to={`/approvals/${pathSeg(g.approval_id)}`} className="mono">{g.approval_id.slice(0, 8)}</Link> : null}{" "}
                        {g.trace_id ? <TraceLink id={g.trace_id} /> : null}
                      </td>
                      <td>
                        {mayWrite(who) ? <button
                          type="button"
                          className="btn btn-small btn-bad"
                          disabled={revoke.isPending}
                          onClick={() => {
                            if (window.confirm(`Revoke the grant of ${g.tools} to ${g.agent}?`)) revoke.mutate(g.id);
                          }}
                        >
                          Revoke
                        </button> : null}
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
