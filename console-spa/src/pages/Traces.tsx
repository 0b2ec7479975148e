import { useEffect, useState } from "react";
import { useTraces, useTraceVerify, useWhy } from "../api/queries";
import type { TraceVerify } from "../api/types";
import { Section, Time, TraceLink } from "../components/bits";
import { ErrorNote, Loading, QueryState } from "../components/states";
import { TraceDetail, TraceOutcome, TraceTable } from "../components/TraceTable";
import { formatTime } from "../lib/format";
import { navigate, useLocation } from "../router";

export function TracesPage() {
  const loc = useLocation();
  const agent = loc.query.get("agent") ?? "";
  const tool = loc.query.get("tool") ?? "";
  const trace = loc.query.get("trace") ?? "";
  const limit = Number(loc.query.get("limit") ?? 100) || 100;
  const [form, setForm] = useState({ agent, tool, trace });
  useEffect(() => setForm({ agent, tool, trace }), [agent, tool, trace]);
  const q = useTraces({ agent, tool, trace, limit });
  return (
    <>
      <h1>Traces</h1>
      <form
        className="filters"
        onSubmit={(e) => {
          e.preventDefault();
          navigate("/traces", { agent: form.agent.trim(), tool: form.tool.trim(), trace: form.trace.trim() });
        }}
      >
        <div className="field">
          <label htmlFor="f-agent">Agent</label>
          <input id="f-agent" value={form.agent} onChange={(e) => setForm({ ...form, agent: e.target.value })} placeholder="exact agent id" />
        </div>
        <div className="field">
          <label htmlFor="f-tool">Tool</label>
          <input id="f-tool" value={form.tool} onChange={(e) => setForm({ ...form, tool: e.target.value })} placeholder="exact tool name" />
        </div>
        <div className="field">
          <label htmlFor="f-trace">Trace id</label>
          <input id="f-trace" className="mono" value={form.trace} onChange={(e) => setForm({ ...form, trace: e.target.value })} placeholder="32 hex" />
        </div>
        <div className="row">
          <button type="submit" className="btn">Filter</button>
          {agent || tool || trace ? (
            <button type="button" className="btn btn-ghost" onClick={() => navigate("/traces")}>Clear</button>
          ) : null}
        </div>
      </form>
      {trace ? <WhyChainView id={trace} /> : <VerifyPanel />}
      <Section title={trace ? "Entries of this trace" : "Tool calls, newest first"}>
        <QueryState query={q} what="traces" isEmpty={(d) => d.length === 0} empty={agent || tool || trace ? "No trace matches these filters (they are exact matches)." : "No tool call has been traced yet."}>
          {(d) =>
            trace && d.length === 1 ? (
              <TraceDetail t={d[0]!} full />
            ) : (
              <>
                <TraceTable traces={d} />
                {d.length >= limit ? (
                  <p>
                    <button type="button" className="btn btn-ghost" onClick={() => navigate("/traces", { agent, tool, trace, limit: String(Math.min(limit * 2, 1000)) })}>
                      Show more
                    </button>
                  </p>
                ) : null}
              </>
            )
          }
        </QueryState>
      </Section>
      {trace ? <VerifyPanel /> : null}
    </>
  );
}

function WhyChainView({ id }: { id: string }) {
  const q = useWhy(id);
  return (
    <Section title="Why: the chain of calls that led here">
      {q.isPending ? (
        <Loading what="the why-chain" />
      ) : q.isError ? (
        <ErrorNote error={q.error} what="the why-chain" />
      ) : q.data.chain.length <= 1 ? (
        <p className="muted">This call has no parent trace: it started its own chain.</p>
      ) : (
        <ol className="chain">
          {q.data.chain.map((t, i) => (
            <li key={`${t.trace_id}-${i}`} className={t.trace_id === id ? "chain-current" : undefined}>
              <a href={`#/traces?trace=${encodeURIComponent(t.trace_id)}`} className="mono">{t.trace_id.slice(0, 8)}</a>{" "}
              <span className="mono">{t.tool}</span> by {t.agent_id || t.user_id} <TraceOutcome t={t} />{" "}
              {t.policy_rule ? <span className="mono small muted">{t.policy_rule}</span> : null} <Time ts={t.timestamp} />
            </li>
          ))}
        </ol>
      )}
    </Section>
  );
}

export function VerifyReport({ r }: { r: TraceVerify }) {
  const broken = !!r.break;
  return (
    <div>
      <p className={`note ${broken ? "note-error" : r.chained ? "note-ok" : "note-empty"}`} role="status">
        {broken ? (
          <>
            <strong>The trace chain is broken</strong> at {r.break!.file}:{r.break!.line}
            {r.break!.seq != null ? ` (seq ${r.break!.seq})` : ""}: {r.break!.reason}
          </>
        ) : r.chained ? (
          <>
            <strong>The trace chain holds</strong>: {r.chained} chained lines
            {r.first_seq != null ? ` (seq ${r.first_seq}–${r.last_seq})` : ""}, {r.alg ?? "sha256"}
            {r.hmac ? " with a key" : ""}.
          </>
        ) : (
          <>No chained trace line yet{r.persistent === false ? ": traces are not persisted on this server" : ""}.</>
        )}
      </p>
      {r.outcome_unknown ? (
        <div className="note note-warn" role="note">
          <strong>
            {r.outcome_unknown} call{r.outcome_unknown === 1 ? "" : "s"} with outcome unknown
          </strong>
          : authorised and possibly run, with no outcome recorded (still in flight, or the server stopped during the call).
          <ul>
            {(r.outcome_unknown_calls ?? []).map((c) => (
              <li key={`${c.trace_id}:${c.seq}`}>
                <TraceLink id={c.trace_id} /> <span className="mono">{c.tool}</span> by {c.agent_id || "anonymous"}, <Time ts={c.timestamp} />{" "}
                <span className="muted small">seq {c.seq}</span>
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      <details>
        <summary>Chain details</summary>
      <dl className="facts">
        <dt>Lines</dt>
        <dd>{r.lines} ({r.unchained} before the chain started)</dd>
        {r.head ? (
          <>
            <dt>Head</dt>
            <dd className="mono small">{r.head}</dd>
          </>
        ) : null}
        {r.anchor ? (
          <>
            <dt>Anchor</dt>
            <dd className="mono small">{r.anchor}</dd>
          </>
        ) : null}
        {r.files?.length ? (
          <>
            <dt>Files</dt>
            <dd className="mono small">{r.files.join(", ")}</dd>
          </>
        ) : null}
        {r.verified_at ? (
          <>
            <dt>Verified</dt>
            <dd>{formatTime(r.verified_at)}</dd>
          </>
        ) : null}
      </dl>
      </details>
    </div>
  );
}

function VerifyPanel() {
  const q = useTraceVerify();
  return (
    <Section
      title="Chain verification"
      actions={
        <button type="button" className="btn btn-ghost" disabled={q.isFetching} onClick={() => void q.refetch()}>
          {q.isFetching ? "Verifying…" : "Verify now"}
        </button>
      }
    >
      <QueryState query={q} what="the chain report">{(r) => <VerifyReport r={r} />}</QueryState>
    </Section>
  );
}
