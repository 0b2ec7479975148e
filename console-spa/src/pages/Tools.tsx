import { useMemo, useState } from "react";
import { CONSOLE_BY, useAction } from "../api/actions";
import { useWrites } from "../api/people";
import { mesh } from "../api/client";
import { isNotConfigured, pinningKnownOff, rememberPinningOff, useMcpServers, usePins, usePolicies, useToolDecisions, useTools } from "../api/queries";
import { Badge, Section, Time } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { Link, pathSeg } from "../router";

export function ToolsPage() {
  const tools = useTools();
  const policies = usePolicies();
  const agents = useMemo(() => [...new Set((policies.data ?? []).map((p) => p.agent).filter((a) => !/[*?[]/.test(a)))].sort(), [policies.data]);
  const [agent, setAgent] = useState("");
  const asAgent = agent.trim() || agents[0] || "anonymous";
  const decisions = useToolDecisions(asAgent);
  const byName = useMemo(() => new Map((decisions.data ?? []).map((d) => [d.name, d])), [decisions.data]);
  const [filter, setFilter] = useState("");
  return (
    <>
      <h1>Tools</h1>
      <Section
        title="Catalog"
        actions={
          <form className="inline-form" onSubmit={(e) => e.preventDefault()}>
            <label htmlFor="as-agent" className="small">Action for agent</label>
            <input id="as-agent" list="agent-names" value={agent} placeholder={asAgent} onChange={(e) => setAgent(e.target.value)} />
            <datalist id="agent-names">
              {agents.map((a) => (
                <option key={a} value={a} />
              ))}
            </datalist>
            <label htmlFor="tool-filter" className="sr-only">Filter tools</label>
            <input id="tool-filter" type="search" placeholder="filter" value={filter} onChange={(e) => setFilter(e.target.value)} />
          </form>
        }
      >
        {decisions.isError ? <ErrorNote error={decisions.error} what="effective actions" /> : null}
        <QueryState query={tools} what="tools" isEmpty={(d) => d.length === 0} empty="No tool is registered. Add upstream MCP servers, OpenAPI specs or CLI tools to the config.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Tool</th>
                    <th scope="col">Source</th>
                    <th scope="col">Class</th>
                    <th scope="col">Action for {asAgent}</th>
                    <th scope="col" className="hide-narrow">Description</th>
                  </tr>
                </thead>
                <tbody>
                  {d
                    .filter((t) => !filter || t.name.toLowerCase().includes(filter.toLowerCase()))
                    .map((t) => {
                      const dec = byName.get(t.name);
                      const c = t.classification ?? dec?.classification;
                      return (
                        <tr key={t.name}>
                          <td data-label="Tool" className="mono">{t.name}</td>
                          <td data-label="Source" className="small">{t.source}{t.mcp_server ? <span className="muted"> · {t.mcp_server}</span> : null}</td>
                          <td data-label="Class">
                            {c ? (
                              <span className={`tag tag-${c.access}`} title={c.reasons?.join("; ")}>
                                {c.access}{c.family === "generic" ? " (generic)" : ""}
                              </span>
                            ) : null}
                          </td>
                          <td data-label="Action for">
                            {dec ? <Badge value={dec.action} title={dec.rule} /> : <span className="muted small">{decisions.isPending ? "…" : "–"}</span>}
                            {dec?.conditional?.length ? <span className="muted small"> +{dec.conditional.length} conditional</span> : null}
                            {dec?.pin && dec.pin !== "pinned" ? <> <Badge value={dec.pin} title="tool pin" /></> : null}
                          </td>
                          <td data-label="Description" className="hide-narrow small">{t.description}</td>
                        </tr>
                      );
                    })}
                </tbody>
              </table>
            </div>
          )}
        </QueryState>
        <p className="small">
          Change an action for one agent on <Link to={`/agents/${pathSeg(asAgent)}`}>{asAgent}'s page</Link>.
        </p>
      </Section>
      <McpServers />
      <Pins />
    </>
  );
}

function McpServers() {
  const q = useMcpServers();
  return (
    <Section title="MCP servers">
      <QueryState query={q} what="MCP servers" isEmpty={(d) => d.length === 0} empty="No upstream MCP server is configured.">
        {(d) => (
          <div className="cards">
            {d.map((s) => (
              <article key={s.name} className="mini-card">
                <header>
                  <strong>{s.name}</strong> <Badge value={s.status} />
                </header>
                <p className="small muted">{s.transport} · {(s.tools ?? []).length} tools</p>
                {s.error ? <p className="small text-bad">{s.error}</p> : null}
                {(s.tools ?? []).length ? (
                  <p className="small mono tool-names">{(s.tools ?? []).join(", ")}</p>
                ) : null}
              </article>
            ))}
          </div>
        )}
      </QueryState>
    </Section>
  );
}

function Pins() {
  const [knownOff, setKnownOff] = useState(pinningKnownOff);
  const q = usePins(!knownOff);
  const writes = useWrites();
  const accept = useAction((body: { tools?: string[]; server?: string }) => mesh.post<unknown>("/tools/pins/accept", { ...body, by: CONSOLE_BY }), [["pins"], ["tool-decisions"]]);
  if (knownOff || isNotConfigured(q.error)) {
    return (
      <Section title="Tool pins">
        <p className="note note-empty" data-pins="not-configured">
          Pinning is not configured on this server (<code>pin_tools</code> is off). With it on, the mesh remembers each upstream tool's description and
          blocks a tool whose description changes until someone accepts it here.{" "}
          <button
            type="button"
            className="link-button"
            onClick={() => {
              rememberPinningOff(false);
              setKnownOff(false);
              void q.refetch();
            }}
          >
            Check again
          </button>
        </p>
      </Section>
    );
  }
  return (
    <Section title="Tool pins waiting for review">
      {accept.error ? <ErrorNote error={accept.error} /> : accept.isSuccess ? <p className="note note-ok" role="status">Accepted.</p> : null}
      <QueryState query={q} what="pins" isEmpty={(d) => d.filter((p) => p.status !== "pinned").length === 0} empty="Every tool description matches its pin.">
        {(d) => {
          const pending = d.filter((p) => p.status !== "pinned");
          const servers = [...new Set(pending.map((p) => p.server))];
          return (
            <>
              <div className="row">
                {servers.map((s) => (
                  <button key={s} type="button" className="btn btn-small" disabled={accept.isPending || !writes} onClick={() => accept.mutate({ server: s })}>
                    Accept all from {s}
                  </button>
                ))}
              </div>
              <div className="table-wrap">
                <table className="stack">
                  <thead>
                    <tr>
                      <th scope="col">Tool</th>
                      <th scope="col">Status</th>
                      <th scope="col">Description</th>
                      <th scope="col"><span className="sr-only">Actions</span></th>
                    </tr>
                  </thead>
                  <tbody>
                    {pending.map((p) => (
                      <tr key={`${p.server}/${p.tool}`}>
                        <td data-label="Tool" className="mono">{p.tool}<div className="muted small">{p.server}</div></td>
                        <td data-label="Status"><Badge value={p.status} /> {p.pinned_at ? <div className="small muted">pinned <Time ts={p.pinned_at} /></div> : null}</td>
                        <td data-label="Description" className="small">
                          {p.status === "changed" && p.pinned_description !== undefined ? (
                            <div className="diff">
                              <del aria-label="pinned description">{p.pinned_description}</del>
                              <ins aria-label="current description">{p.current_description}</ins>
                            </div>
                          ) : (
                            p.current_description
                          )}
                        </td>
                        <td data-label="">
                          <button type="button" className="btn btn-small" disabled={accept.isPending || !writes} onClick={() => accept.mutate({ tools: [p.tool] })}>
                            Accept
                          </button>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            </>
          );
        }}
      </QueryState>
    </Section>
  );
}
