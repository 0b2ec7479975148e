import { useState } from "react";
import { CONSOLE_BY, useAction } from "../api/actions";
import { mesh, seg } from "../api/client";
import { useWho } from "../api/people";
import { isActiveHalt, useHalts } from "../api/queries";
import type { Halt, HaltCreated } from "../api/types";
import { Badge, Section, Time } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { globProblem } from "../lib/glob";
import { mayWrite } from "../lib/people";

const SCOPES: { value: Halt["scope"]; label: string; help: string }[] = [
  { value: "all", label: "Everything", help: "Blocks every agent, revokes every grant and denies every pending approval." },
  { value: "agent", label: "One agent (id or glob)", help: "Blocks that agent only, with its grants and pending approvals." },
  { value: "session", label: "One session", help: "Blocks calls of that session only." },
];

function revokedCount(h: Halt): number {
  return Array.isArray(h.revoked_grants) ? h.revoked_grants.length : typeof h.revoked_grants === "number" ? h.revoked_grants : 0;
}

export function HaltsPage() {
  const q = useHalts(true);
  const writes = mayWrite(useWho());
  const [form, setForm] = useState<{ scope: Halt["scope"]; target: string; reason: string }>({ scope: "all", target: "", reason: "" });
  const stop = useAction(
    (v: typeof form) => mesh.post<HaltCreated>("/halts", { scope: v.scope, target: v.scope === "all" ? "" : v.target.trim(), reason: v.reason.trim(), by: CONSOLE_BY }),
    [["halts"], ["grants"], ["approvals"]],
    () => setForm({ scope: "all", target: "", reason: "" }),
  );
  const resume = useAction((id: string) => mesh.post<unknown>(`/halts/${seg(id)}/resume`, { by: CONSOLE_BY }), [["halts"], ["grants"]]);
  const scope = SCOPES.find((s) => s.value === form.scope)!;
  const targetProblem = form.scope === "agent" ? globProblem(form.target.trim()) : "";
  return (
    <>
      <h1>Emergency stop</h1>
      {writes ? <Section title="Stop now">
        <form
          className="form"
          onSubmit={(e) => {
            e.preventDefault();
            const what = form.scope === "all" ? "EVERY agent" : `${form.scope} ${form.target}`;
            if (targetProblem) return;
            if (window.confirm(`Stop ${what}? Tool calls will be refused until you resume.`)) stop.mutate(form);
          }}
        >
          <fieldset>
            <legend>Scope</legend>
            {SCOPES.map((s) => (
              <label key={s.value} className="check">
                <input type="radio" name="scope" value={s.value} checked={form.scope === s.value} onChange={() => setForm({ ...form, scope: s.value })} />
                {s.label}
              </label>
            ))}
            <span className="help">{scope.help}</span>
          </fieldset>
          {form.scope !== "all" ? (
            <div className="field">
              <label htmlFor="h-target">{form.scope === "agent" ? "Agent id or glob" : "Session id"}</label>
              <input
                id="h-target"
                required
                value={form.target}
                aria-invalid={targetProblem ? true : undefined}
                aria-describedby={targetProblem ? "h-target-problem" : undefined}
                onChange={(e) => setForm({ ...form, target: e.target.value })}
              />
              {targetProblem ? <span className="field-error" id="h-target-problem" role="alert">Not a valid glob: {targetProblem}.</span> : null}
            </div>
          ) : null}
          <div className="field">
            <label htmlFor="h-reason">Reason</label>
            <input id="h-reason" value={form.reason} onChange={(e) => setForm({ ...form, reason: e.target.value })} placeholder="what went wrong" />
          </div>
          <div className="row">
            <button type="submit" className="btn btn-bad btn-big" disabled={stop.isPending || !!targetProblem}>Stop</button>
          </div>
        </form>
        {stop.error ? <ErrorNote error={stop.error} /> : stop.data ? (
          <p className="note note-warn" role="status">
            {stop.data.already_active ? "That stop was already in force." : "Stopped."} {stop.data.revoked_grants} grant(s) revoked, {stop.data.denied_approvals} pending approval(s) denied.
          </p>
        ) : null}
      </Section> : <p className="note" data-role-note="">Only an admin or an owner stops or resumes.</p>}
      <Section title="Stops">
        {resume.error ? <ErrorNote error={resume.error} /> : null}
        <QueryState query={q} what="stops" isEmpty={(d) => d.length === 0} empty="No stop is in force. Agents' calls go through their policies as usual.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Scope</th>
                    <th scope="col">Reason</th>
                    <th scope="col">By</th>
                    <th scope="col">Since</th>
                    <th scope="col">State</th>
                    <th scope="col"><span className="sr-only">Actions</span></th>
                  </tr>
                </thead>
                <tbody>
                  {d.map((h) => (
                    <tr key={h.id} className={isActiveHalt(h) ? "row-halt" : undefined}>
                      <td data-label="Scope">{h.scope === "all" ? "everything" : <>{h.scope} <span className="mono">{h.target}</span></>}</td>
                      <td data-label="Reason">{h.reason || <span className="muted">–</span>}</td>
                      <td data-label="By" className="small">{h.created_by}</td>
                      <td data-label="Since"><Time ts={h.created_at} /></td>
                      <td data-label="State" data-halt-state={isActiveHalt(h) ? "active" : "resumed"}>
                        {isActiveHalt(h) ? (
                          <>
                            <Badge value="halted" />
                            {revokedCount(h) ? <div className="small muted">{revokedCount(h)} grant(s) held until resumed</div> : null}
                          </>
                        ) : (
                          <span className="small">
                            resumed <Time ts={h.resumed_at} /> by <span className="mono">{h.resumed_by || "–"}</span>
                          </span>
                        )}
                      </td>
                      <td data-label="">
                        {isActiveHalt(h) && writes ? (
                          <button type="button" className="btn btn-small btn-ok" disabled={resume.isPending} onClick={() => resume.mutate(h.id)}>
                            Resume
                          </button>
                        ) : null}
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
