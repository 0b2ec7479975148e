import { useEffect, useState } from "react";
import { useOtel } from "../api/queries";
import { Section } from "../components/bits";
import { QueryState } from "../components/states";
import { groupTraces, type TraceGroup } from "../lib/otel";
import { Link, navigate, useLocation } from "../router";

const STATUS = ["unset", "ok", "error"];

function Waterfall({ g }: { g: TraceGroup }) {
  const span = Math.max(g.endMs - g.startMs, 1);
  return (
    <div className="waterfall">
      <div className="waterfall-head">
        <Link to="/traces" query={{ trace: g.traceId }} className="mono">{g.traceId.slice(0, 8)}</Link>
        <span className="muted small"> {new Date(g.startMs).toLocaleTimeString()} · {g.spans.length} span{g.spans.length === 1 ? "" : "s"} · {Math.round(span)} ms</span>
      </div>
      <ul className="wf-rows">
        {g.spans.map((s) => {
          const left = ((s.startMs - g.startMs) / span) * 100;
          const width = Math.max(((Math.max(s.endMs, s.startMs) - s.startMs) / span) * 100, 0.8);
          const dur = Math.max(0, s.endMs - s.startMs);
          return (
            <li key={s.spanId} className="wf-row">
              <div className="wf-label" style={{ paddingLeft: `${s.depth * 1}rem` }}>
                <span className="mono">{s.name}</span> <span className="muted small">{s.attrs["agent.id"] ?? ""}</span>
              </div>
              <div className="wf-track" aria-hidden="true">
                <div className={`wf-bar wf-${STATUS[s.statusCode] ?? "unset"} wf-${s.attrs["policy.action"] ?? ""}`} style={{ left: `${Math.min(left, 99)}%`, width: `${Math.min(width, 100 - Math.min(left, 99))}%` }} />
              </div>
              <div className="wf-dur small">
                {dur.toFixed(dur < 10 ? 1 : 0)} ms <span className="sr-only">, {s.attrs["policy.action"] ?? ""}, status {STATUS[s.statusCode]}</span>
                {s.statusMessage ? <span className="text-bad"> {s.statusMessage}</span> : null}
              </div>
            </li>
          );
        })}
      </ul>
    </div>
  );
}

export function OtelPage() {
  const loc = useLocation();
  const agent = loc.query.get("agent") ?? "";
  const tool = loc.query.get("tool") ?? "";
  const [form, setForm] = useState({ agent, tool });
  useEffect(() => setForm({ agent, tool }), [agent, tool]);
  const q = useOtel({ agent, tool, limit: 200 });
  return (
    <>
      <h1>OTEL waterfall</h1>
      <form className="filters" onSubmit={(e) => { e.preventDefault(); navigate("/otel", { agent: form.agent.trim(), tool: form.tool.trim() }); }}>
        <div className="field">
          <label htmlFor="o-agent">Agent</label>
          <input id="o-agent" value={form.agent} onChange={(e) => setForm({ ...form, agent: e.target.value })} />
        </div>
        <div className="field">
          <label htmlFor="o-tool">Tool</label>
          <input id="o-tool" value={form.tool} onChange={(e) => setForm({ ...form, tool: e.target.value })} />
        </div>
        <div className="row">
          <button type="submit" className="btn">Filter</button>
        </div>
      </form>
      <Section title="Spans by trace, newest first">
        <p className="muted small">The same spans the mesh exports over OTLP (GET /otel-traces). Bars are coloured by policy: green allowed, amber approval, red denied or failed.</p>
        <QueryState query={q} what="spans" isEmpty={(d) => groupTraces(d).length === 0} empty="No span yet. Every traced tool call becomes a span here.">
          {(d) => (
            <div className="waterfalls">
              {groupTraces(d).slice(0, 40).map((g) => (
                <Waterfall key={g.traceId} g={g} />
              ))}
            </div>
          )}
        </QueryState>
      </Section>
    </>
  );
}
