import { useQuery } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { useAction } from "../api/actions";
import { callMemoryTool, memoryChain } from "../api/memory";
import type { MemoryChain } from "../api/types";
import { Badge, DecisionBadge, Section, Time, TraceLink } from "../components/bits";
import { Empty, ErrorNote, QueryState } from "../components/states";
import { parseDecisionValue, parseForget, parseHistory, parseList, parseRecall, parseSearch, parseStore, type MemoryListItem } from "../lib/memoryText";
import { isSystemFact, tagView } from "../lib/memoryView";
import { Link, navigate, pathSeg, useLocation } from "../router";
import { Tabs } from "./Approvals";

const TABS = [
  ["browse", "Browse"],
  ["search", "Search"],
  ["decisions", "Decision audit trail"],
] as const;

const splitTags = (s: string) => s.split(",").map((t) => t.trim()).filter(Boolean);

export function MemoryPage() {
  const loc = useLocation();
  const key = loc.query.get("key");
  const tab = loc.query.get("tab") ?? "browse";
  return (
    <>
      <h1>Memory</h1>
      <ChainStatus />
      {key !== null ? (
        <Entry k={key} />
      ) : (
        <>
          <Tabs tabs={TABS} current={tab} base="/memory" />
          {tab === "search" ? <SearchView /> : tab === "decisions" ? <Decisions /> : <Browse />}
        </>
      )}
    </>
  );
}

function useChain() {
  return useQuery({ queryKey: ["mem-chain"], queryFn: ({ signal }) => memoryChain(signal), refetchInterval: 30_000 });
}

export function ChainSummary({ c }: { c: MemoryChain }) {
  const r = c.report;
  if (r.break) {
    return (
      <p className="note note-error" role="status">
        <strong>The memory chain is broken</strong> at {r.break.file}:{r.break.line} ({r.break.entity}): {r.break.reason}
      </p>
    );
  }
  return (
    <p className={`note ${c.holds ? "note-ok" : "note-warn"}`} role="status">
      {c.holds ? <strong>The memory chain holds</strong> : <strong>The memory chain does not hold</strong>}: {r.entries} entries, {r.sealed} sealed
      {r.legacy ? `, ${r.legacy} written before the chain` : ""}
      {r.keyed ? ", keyed (HMAC)" : ", unkeyed (SHA-256)"}.
    </p>
  );
}

function ChainStatus() {
  const q = useChain();
  if (q.isPending) return null;
  if (q.isError) return <ErrorNote error={q.error} what="the memory chain report" />;
  return <ChainSummary c={q.data} />;
}

/** A tag as the page shows it: an `at:` epoch as a time, signatures and ids cut (the whole tag in the title). */
function Tag({ tag }: { tag: string }) {
  const v = tagView(tag);
  return (
    <span className="tag" title={v.title}>
      {v.at ? (
        <>
          at <Time ts={v.at} />
        </>
      ) : (
        v.text
      )}
    </span>
  );
}

export function Tags({ tags }: { tags: string[] }) {
  return (
    <span className="tags">
      {tags.map((t) => (
        <Tag key={t} tag={t} />
      ))}
    </span>
  );
}

function MemoryList({ items }: { items: MemoryListItem[] }) {
  return (
    <div className="table-wrap">
      <table className="stack">
        <thead>
          <tr>
            <th scope="col">Key</th>
            <th scope="col">Tags</th>
            <th scope="col" className="hide-narrow">Agent</th>
            <th scope="col">Updated</th>
          </tr>
        </thead>
        <tbody>
          {items.map((m) => (
            <tr key={m.key}>
              <td data-label="Key"><Link to="/memory" query={{ key: m.key }} className="mono">{m.key}</Link></td>
              <td data-label="Tags"><Tags tags={m.tags} /></td>
              <td data-label="Agent" className="hide-narrow">{m.agent}</td>
              <td data-label="Updated"><Time ts={m.updated} /></td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Browse() {
  const loc = useLocation();
  const showSystem = loc.query.get("system") === "1";
  const [filter, setFilter] = useState({ tags: "", agent: "" });
  const [applied, setApplied] = useState(filter);
  const q = useQuery({
    queryKey: ["mem", "list", applied],
    queryFn: () => callMemoryTool("memory_list", { tags: splitTags(applied.tags), agent: applied.agent.trim() }).then(parseList),
    refetchInterval: 15_000,
  });
  // Decision facts (one per settled approval) are the system's record, shown on the decision trail; here they
  // would bury what agents and people stored, so they are hidden unless asked for (or filtered by tag).
  const asked = showSystem || splitTags(applied.tags).includes("decision");
  return (
    <>
      <Section title="Memories">
        <form className="filters" onSubmit={(e) => { e.preventDefault(); setApplied(filter); }}>
          <div className="field">
            <label htmlFor="m-tags">Tags (all of)</label>
            <input id="m-tags" value={filter.tags} onChange={(e) => setFilter({ ...filter, tags: e.target.value })} placeholder="a, b" />
          </div>
          <div className="field">
            <label htmlFor="m-agent">Agent</label>
            <input id="m-agent" value={filter.agent} onChange={(e) => setFilter({ ...filter, agent: e.target.value })} />
          </div>
          <div className="field">
            <label className="check">
              <input
                type="checkbox"
                checked={showSystem}
                onChange={(e) => navigate("/memory", { ...Object.fromEntries(loc.query.entries()), system: e.target.checked ? "1" : "" })}
              />
              Show decision facts
            </label>
          </div>
          <div className="row"><button type="submit" className="btn">List</button></div>
        </form>
        <QueryState query={q} what="memories" isEmpty={(d) => d.length === 0} empty="No memories found. Agents store them with memory_store; you can add one below.">
          {(d) => {
            const system = d.filter(isSystemFact).length;
            const shown = asked ? d : d.filter((m) => !isSystemFact(m));
            return (
              <>
                <p className="muted small" data-system-hidden={asked ? 0 : system}>
                  {shown.length} memories, newest first.
                  {!asked && system ? <> {system} decision facts hidden (the <Link to="/memory" query={{ tab: "decisions" }}>decision audit trail</Link> lists them).</> : null}
                </p>
                {shown.length ? <MemoryList items={shown} /> : <Empty>Only decision facts so far. Agents store memories with memory_store; you can add one below.</Empty>}
              </>
            );
          }}
        </QueryState>
      </Section>
      <StoreForm />
    </>
  );
}

function StoreForm() {
  const [form, setForm] = useState({ key: "", value: "", tags: "", agent: "" });
  const store = useAction(
    (v: typeof form) => callMemoryTool("memory_store", { key: v.key.trim(), value: v.value, tags: splitTags(v.tags), agent: v.agent.trim() }),
    [["mem"]],
    () => setForm({ key: "", value: "", tags: "", agent: "" }),
  );
  const done = store.data ? parseStore(store.data) : null;
  return (
    <Section title="Store a memory">
      <form className="form" onSubmit={(e) => { e.preventDefault(); store.mutate(form); }}>
        <div className="form-row">
          <div className="field">
            <label htmlFor="st-key">Key</label>
            <input id="st-key" required value={form.key} onChange={(e) => setForm({ ...form, key: e.target.value })} />
          </div>
          <div className="field">
            <label htmlFor="st-tags">Tags</label>
            <input id="st-tags" value={form.tags} onChange={(e) => setForm({ ...form, tags: e.target.value })} placeholder="a, b" />
          </div>
          <div className="field">
            <label htmlFor="st-agent">Agent</label>
            <input id="st-agent" value={form.agent} onChange={(e) => setForm({ ...form, agent: e.target.value })} />
          </div>
        </div>
        <div className="field">
          <label htmlFor="st-value">Value</label>
          <textarea id="st-value" required rows={3} value={form.value} onChange={(e) => setForm({ ...form, value: e.target.value })} />
        </div>
        <div className="row"><button type="submit" className="btn" disabled={store.isPending}>Store</button></div>
        {store.error ? <ErrorNote error={store.error} /> : store.data ? (
          <p className="note note-ok" role="status">
            {done ? <>Memory <Link to="/memory" query={{ key: done.key }}>{done.key}</Link> {done.created ? "created" : "updated"} ({done.total} entries).</> : store.data}
          </p>
        ) : null}
      </form>
    </Section>
  );
}

function SearchView() {
  const loc = useLocation();
  const query = loc.query.get("q") ?? "";
  const [form, setForm] = useState({ q: query, agent: loc.query.get("agent") ?? "", tags: loc.query.get("tags") ?? "", mode: loc.query.get("mode") ?? "natural" });
  useEffect(() => setForm((f) => ({ ...f, q: query })), [query]);
  const args = { query, agent: loc.query.get("agent") ?? "", tags: splitTags(loc.query.get("tags") ?? ""), mode: loc.query.get("mode") ?? "natural", limit: 20 };
  const q = useQuery({
    queryKey: ["mem", "search", args],
    queryFn: () => callMemoryTool("memory_search", args).then(parseSearch),
    enabled: !!query,
  });
  return (
    <Section title="Search">
      <form className="filters" role="search" onSubmit={(e) => { e.preventDefault(); navigate("/memory", { tab: "search", q: form.q.trim(), agent: form.agent.trim(), tags: form.tags.trim(), mode: form.mode }); }}>
        <div className="field grow">
          <label htmlFor="q">Query</label>
          <input id="q" type="search" value={form.q} onChange={(e) => setForm({ ...form, q: e.target.value })} placeholder="what do you remember about…" />
        </div>
        <div className="field">
          <label htmlFor="q-agent">Agent</label>
          <input id="q-agent" value={form.agent} onChange={(e) => setForm({ ...form, agent: e.target.value })} />
        </div>
        <div className="field">
          <label htmlFor="q-tags">Tags</label>
          <input id="q-tags" value={form.tags} onChange={(e) => setForm({ ...form, tags: e.target.value })} />
        </div>
        <div className="field">
          <label htmlFor="q-mode">Mode</label>
          <select id="q-mode" value={form.mode} onChange={(e) => setForm({ ...form, mode: e.target.value })}>
            <option value="natural">natural language</option>
            <option value="raw">FTS5 query</option>
          </select>
        </div>
        <div className="row"><button type="submit" className="btn">Search</button></div>
      </form>
      {!query ? (
        <p className="muted">Type a question or keywords; results are ranked by relevance and recency.</p>
      ) : (
        <QueryState query={q} what="results" isEmpty={(d) => d.blocks.length === 0} empty="No memories found for this query. Try fewer words or the other mode.">
          {(d) => (
            <>
              <p className="muted small">{d.count} results (ranked by relevance).</p>
              <ol className="results">
                {d.blocks.map((b) => (
                  <li key={b.key}>
                    <Link to="/memory" query={{ key: b.key }} className="mono">{b.key}</Link>{" "}
                    <Tags tags={b.tags} /> <span className="muted small">{b.agent ? `by ${b.agent} · ` : ""}<Time ts={b.updated} /></span>
                    <pre className="code value">{b.value}</pre>
                  </li>
                ))}
              </ol>
            </>
          )}
        </QueryState>
      )}
    </Section>
  );
}

export interface TaggedDecision {
  outcome: string;
  tool: string;
  agent: string;
  by: string;
  /** the approval it settled and the call it decided (facts written since they carry `approval:` and `trace:`) */
  approval: string;
  trace: string;
}

export function decisionFromTags(tags: string[]): TaggedDecision {
  const outcomes = new Set(["approved", "rejected", "denied", "timeout", "timed out", "escalated"]);
  let outcome = "";
  let agent = "";
  let by = "";
  let approval = "";
  let trace = "";
  const rest: string[] = [];
  for (const t of tags) {
    if (outcomes.has(t)) outcome = t;
    else if (t.startsWith("agent:")) agent = t.slice(6);
    else if (t.startsWith("by:")) by = t.slice(3);
    else if (t.startsWith("approval:")) approval = t.slice(9);
    else if (t.startsWith("trace:")) trace = t.slice(6);
    else if (t !== "decision" && t !== "supervisor" && !t.startsWith("at:") && !t.startsWith("sig:")) rest.push(t);
  }
  return { outcome, tool: rest[0] ?? "", agent, by, approval, trace };
}

/** A tagged kind (`by:mem7`) as a resolver the badge classifies the same way. */
const KIND_RESOLVER: Record<string, string> = { mem7: "supervisor:mem7", supervisor: "supervisor:", system: "system:", human: "human" };

const outcomeStatus = (o: string) => (o === "rejected" ? "denied" : o === "timed out" ? "timeout" : o);

function Decisions() {
  const q = useQuery({
    queryKey: ["mem", "list", { tags: "decision", agent: "" }],
    queryFn: () => callMemoryTool("memory_list", { tags: ["decision"] }).then(parseList),
    refetchInterval: 15_000,
  });
  return (
    <Section title="Every approval decision the mesh and the supervisor remembered">
      <QueryState query={q} what="decisions" isEmpty={(d) => d.length === 0} empty="No decision in memory yet. Each resolved or timed-out approval is written here.">
        {(d) => (
          <div className="table-wrap">
            <table className="stack">
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Tool</th>
                  <th scope="col">Agent</th>
                  <th scope="col">Outcome</th>
                  <th scope="col">By</th>
                  <th scope="col">Call</th>
                  <th scope="col" className="hide-narrow">Memory</th>
                </tr>
              </thead>
              <tbody>
                {d.map((m) => {
                  const x = decisionFromTags(m.tags);
                  return (
                    <tr key={m.key}>
                      <td data-label="When"><Time ts={m.updated} /></td>
                      <td data-label="Tool" className="mono">{x.tool}</td>
                      <td data-label="Agent">{x.agent || m.agent}</td>
                      <td data-label="Outcome">{x.outcome === "escalated" ? <Badge value="escalated" /> : <DecisionBadge status={outcomeStatus(x.outcome)} by={KIND_RESOLVER[x.by] ?? ""} />}</td>
                      <td data-label="By">{x.by ? <span className={`tag tag-${x.by}`}>{x.by}</span> : <span className="muted">–</span>}</td>
                      <td data-label="Call">
                        {x.trace ? <TraceLink id={x.trace} /> : <span className="muted">–</span>}
                        {x.approval ? <> · <Link to={`/approvals/${pathSeg(x.approval)}`} className="mono small">approval</Link></> : null}
                      </td>
                      <td data-label="Memory" className="hide-narrow"><Link to="/memory" query={{ key: m.key }} className="mono small">{m.key}</Link></td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        )}
      </QueryState>
    </Section>
  );
}

function Entry({ k }: { k: string }) {
  const recall = useQuery({ queryKey: ["mem", "recall", k], queryFn: () => callMemoryTool("memory_recall", { key: k }).then(parseRecall) });
  const history = useQuery({ queryKey: ["mem", "history", k], queryFn: () => callMemoryTool("memory_history", { key: k }).then(parseHistory) });
  const forget = useAction((key: string) => callMemoryTool("memory_forget", { key }).then(parseForget), [["mem"], ["mem-chain"]]);
  return (
    <>
      <p><Link to="/memory">← Memory</Link></p>
      <h2 className="mono">{k}</h2>
      <Section
        title="Current value"
        actions={
          <button
            type="button"
            className="btn btn-small btn-danger"
            disabled={forget.isPending}
            onClick={() => {
              if (window.confirm(`Forget ${k}? A tombstone is appended; the history stays.`)) forget.mutate(k);
            }}
          >
            Forget
          </button>
        }
      >
        {forget.error ? <ErrorNote error={forget.error} /> : forget.data ? (
          <p className="note note-ok" role="status">{forget.data.removed ? `Forgotten (${forget.data.remaining} memories remain).` : "Nothing to forget: no live memory has this key."}</p>
        ) : null}
        <QueryState query={recall} what="the memory" isEmpty={(d) => !d.some((b) => b.key === k)} empty="No live memory has this key (it may have been forgotten or expired); its history is below.">
          {(d) => {
            const b = d.find((x) => x.key === k)!;
            const decision = parseDecisionValue(b.value);
            return (
              <>
                <dl className="facts">
                  <dt>Tags</dt>
                  <dd>{b.tags.length ? <Tags tags={b.tags} /> : <span className="muted">none</span>}</dd>
                  <dt>Agent</dt>
                  <dd>{b.agent || <span className="muted">–</span>}</dd>
                  <dt>Updated</dt>
                  <dd><Time ts={b.updated} /></dd>
                  {decision ? (
                    <>
                      <dt>Decision</dt>
                      <dd>
                        <DecisionBadge status={outcomeStatus(decision.outcome)} by={decision.by} /> by {decision.by} for <span className="mono">{decision.tool}</span> ({decision.agent})
                        {decision.reason ? <> — {decision.reason}</> : null}
                        {(() => {
                          const x = decisionFromTags(b.tags);
                          return x.trace || x.approval ? (
                            <div className="small">
                              {x.trace ? <>Call <TraceLink id={x.trace} /></> : null}
                              {x.approval ? <> · <Link to={`/approvals/${pathSeg(x.approval)}`} className="mono">approval {x.approval.slice(0, 8)}</Link></> : null}
                            </div>
                          ) : null;
                        })()}
                      </dd>
                    </>
                  ) : null}
                </dl>
                <pre className="code value">{b.value}</pre>
              </>
            );
          }}
        </QueryState>
      </Section>
      <Section title="History (from the markdown, oldest first)">
        <QueryState query={history} what="the history" isEmpty={(d) => d.events.length === 0} empty="No history for this key.">
          {(d) => (
            <ol className="history">
              {d.events.map((e, i) => (
                <li key={i}>
                  <Time ts={e.when} /> <span className={`tag tag-${e.what.startsWith("delete") ? "bad" : "ok"}`}>{e.what}</span>
                  {e.tags.length ? <> {e.tags.join(", ")}</> : null}
                  {e.agent ? <> by {e.agent}</> : null}
                  {e.valid ? <span className="small"> · valid {e.valid}</span> : null}
                  {e.trace ? <span className="small"> · trace <TraceLink id={e.trace} /></span> : null}
                  {e.seal ? <span className="small"> · seal <code>{e.seal}</code></span> : e.unsealed ? <span className="small muted"> · unsealed (written before the chain)</span> : null}
                </li>
              ))}
            </ol>
          )}
        </QueryState>
      </Section>
    </>
  );
}
