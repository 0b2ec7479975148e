import { useEffect, useMemo, useState } from "react";
import { useDecisions } from "../api/queries";
import type { DecisionPage } from "../api/types";
import { DecisionBadge, Resolver, Section, Time, TraceLink } from "../components/bits";
import { QueryState } from "../components/states";
import { decisionParams, EMPTY_FILTERS, filterProblem, filtersFromQuery, filtersToQuery, OUTCOMES, PAGE_SIZES, pageInfo, RANGES, RESOLVERS, type DecisionFilters } from "../lib/decisions";
import { Link, navigate, pathSeg, useLocation } from "../router";

export function DecisionsPage() {
  return (
    <>
      <h1>Decisions</h1>
      <p className="muted">
        Every settled approval: who decided (a human, a supervisor, a precedent from memory, or the system when
        nobody did in time), when, and the call it decided. Each is also written to memory as a signed fact.
      </p>
      <DecisionsView base="/decisions" />
    </>
  );
}

/** The filtered, paged list; its filters live in the URL of `base` (plus `fixed`, e.g. the Approvals tab). */
export function DecisionsView({ base, fixed }: { base: string; fixed?: Record<string, string> }) {
  const loc = useLocation();
  const applied = filtersFromQuery(loc.query);
  const appliedKey = JSON.stringify(applied);
  const [draft, setDraft] = useState<DecisionFilters>(applied);
  useEffect(() => setDraft(JSON.parse(appliedKey) as DecisionFilters), [appliedKey]);
  const minute = Math.floor(Date.now() / 60_000) * 60_000; // "last hour" moves on once a minute, not every render
  const params = useMemo(() => decisionParams(JSON.parse(appliedKey) as DecisionFilters, minute), [appliedKey, minute]);
  const problem = filterProblem(applied);
  const q = useDecisions(params, !problem);
  const go = (f: DecisionFilters) => navigate(base, { ...fixed, ...filtersToQuery(f) });
  const draftProblem = filterProblem(draft);
  return (
    <Section title="Decisions">
      <form
        className="filters"
        aria-label="Filter decisions"
        onSubmit={(e) => {
          e.preventDefault();
          if (!draftProblem) go({ ...draft, page: 1 });
        }}
      >
        <div className="field">
          <label htmlFor="d-agent">Agent</label>
          <input id="d-agent" value={draft.agent} placeholder="claude or glob" onChange={(e) => setDraft({ ...draft, agent: e.target.value })} />
        </div>
        <div className="field">
          <label htmlFor="d-tool">Tool</label>
          <input id="d-tool" value={draft.tool} placeholder="fs.* " onChange={(e) => setDraft({ ...draft, tool: e.target.value })} />
        </div>
        <div className="field">
          <label htmlFor="d-outcome">Outcome</label>
          <select id="d-outcome" value={draft.outcome} onChange={(e) => setDraft({ ...draft, outcome: e.target.value })}>
            <option value="">any</option>
            {OUTCOMES.map((o) => (
              <option key={o} value={o}>{o === "timeout" ? "timed out" : o}</option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="d-resolver">Decided by</label>
          <select id="d-resolver" value={draft.resolver} onChange={(e) => setDraft({ ...draft, resolver: e.target.value })}>
            <option value="">anyone</option>
            {RESOLVERS.map(([v, label]) => (
              <option key={v} value={v}>{label}</option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="d-range">When</label>
          <select id="d-range" value={draft.range} onChange={(e) => setDraft({ ...draft, range: e.target.value })}>
            {RANGES.map(([v, label]) => (
              <option key={v} value={v}>{label}</option>
            ))}
          </select>
        </div>
        {draft.range === "custom" ? (
          <>
            <div className="field">
              <label htmlFor="d-from">From</label>
              <input id="d-from" type="datetime-local" value={draft.from} onChange={(e) => setDraft({ ...draft, from: e.target.value })} />
            </div>
            <div className="field">
              <label htmlFor="d-to">To</label>
              <input id="d-to" type="datetime-local" value={draft.to} onChange={(e) => setDraft({ ...draft, to: e.target.value })} />
            </div>
          </>
        ) : null}
        <div className="field">
          <label htmlFor="d-size">Per page</label>
          <select id="d-size" value={draft.size} onChange={(e) => setDraft({ ...draft, size: Number(e.target.value) })}>
            {PAGE_SIZES.map((n) => (
              <option key={n} value={n}>{n}</option>
            ))}
          </select>
        </div>
        <div className="row">
          <button type="submit" className="btn" disabled={!!draftProblem}>Filter</button>
          <button type="button" className="btn btn-ghost" onClick={() => go(EMPTY_FILTERS)}>Clear</button>
        </div>
        {draftProblem ? <p className="note note-warn" role="alert">{draftProblem}</p> : null}
      </form>
      {applied.trace ? (
        <p className="small">
          The decision of call <TraceLink id={applied.trace} />. <Link to={base} query={{ ...fixed, ...filtersToQuery({ ...applied, trace: "", page: 1 }) }}>Show all</Link>
        </p>
      ) : null}
      {problem ? (
        <p className="note note-warn" role="alert">{problem}</p>
      ) : (
      <QueryState query={q} what="decisions" isEmpty={(d) => d.total === 0} empty={Object.keys(filtersToQuery({ ...applied, page: 1 })).length ? "No decision matches these filters." : "No approval has been decided yet."}>
        {(d) => <DecisionTable page={d} filters={applied} onPage={(page) => go({ ...applied, page })} />}
      </QueryState>
      )}
    </Section>
  );
}

function DecisionTable({ page, filters, onPage }: { page: DecisionPage; filters: DecisionFilters; onPage: (n: number) => void }) {
  const info = pageInfo(filters.page, filters.size, page.total);
  return (
    <>
      <p className="muted small" role="status">
        {info.first}–{info.last} of {page.total}, newest first.
      </p>
      <div className="table-wrap">
        <table className="stack decisions">
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Approval</th>
              <th scope="col">Agent</th>
              <th scope="col">Tool</th>
              <th scope="col">Outcome</th>
              <th scope="col">By</th>
              <th scope="col" className="hide-narrow">Reasoning</th>
              <th scope="col">Call</th>
            </tr>
          </thead>
          <tbody>
            {page.decisions.map((a) => (
              <tr key={a.id} data-approval={a.id}>
                <td data-label="When"><Time ts={a.resolved_at ?? a.created_at} /></td>
                <td data-label="Approval"><Link to={`/approvals/${pathSeg(a.id)}`} className="mono">{a.id.slice(0, 8)}</Link></td>
                <td data-label="Agent"><Link to={`/agents/${pathSeg(a.agent_id)}`}>{a.agent_id}</Link></td>
                <td data-label="Tool" className="mono">{a.tool}</td>
                <td data-label="Outcome"><DecisionBadge status={a.status} by={a.resolved_by} kind={a.resolver_kind} /></td>
                <td data-label="By"><Resolver by={a.resolved_by} kind={a.resolver_kind} /></td>
                <td data-label="Reasoning" className="hide-narrow small">
                  {a.reasoning}
                  {a.confidence != null ? <span className="muted"> ({a.confidence})</span> : null}
                </td>
                <td data-label="Call"><TraceLink id={a.trace_id} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {info.pages > 1 ? (
        <nav className="row pager" aria-label="Pages of decisions">
          <button type="button" className="btn btn-small" disabled={!info.hasPrev} onClick={() => onPage(filters.page - 1)}>
            ← Newer
          </button>
          <span className="small">
            Page {filters.page} of {info.pages}
          </span>
          <button type="button" className="btn btn-small" disabled={!info.hasNext} onClick={() => onPage(filters.page + 1)}>
            Older →
          </button>
        </nav>
      ) : null}
    </>
  );
}
