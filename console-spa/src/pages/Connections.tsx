// OAuth connections: the clients a human let act as an agent (docs/managed-agents.md), and revoking them.
import { useAction } from "../api/actions";
import { mesh, seg } from "../api/client";
import { isoOf, useConnections, useOAuthClients, type OAuthClient, type OAuthConnection } from "../api/oauth";
import { Section, Time } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { Link, pathSeg } from "../router";

const TONE: Record<OAuthConnection["state"], string> = { active: "ok", expired: "muted", revoked: "bad" };

function expiry(c: OAuthConnection): number | null {
  const times = [c.expires_at, c.refresh_expires_at].filter((t): t is number => t != null);
  return times.length ? Math.max(...times) : null;
}

export function ConnectionsPage() {
  const q = useConnections();
  const clients = useOAuthClients();
  const revoke = useAction((id: string) => mesh.del<OAuthConnection>(`/oauth/tokens/${seg(id)}`), [["oauth-connections"]]);
  const remove = useAction(
    // in the query: a metadata document's client id is an https URL, which a path segment cannot carry
    (id: string) => mesh.del<OAuthClient>(`/oauth/clients?client_id=${seg(id)}`),
    [["oauth-clients"], ["oauth-connections"]],
  );
  return (
    <>
      <h1>Connections</h1>
      <p className="muted">
        Clients that connected by OAuth (Claude, ChatGPT, remote MCP clients), each acting as the agent a human picked
        when approving it. Revoking one stops its tokens at once; the client has to ask for a new consent.
      </p>
      <Section title="Connections">
        {revoke.error ? <ErrorNote error={revoke.error} /> : null}
        <QueryState query={q} what="connections" isEmpty={(d) => d.length === 0} empty="No client has connected by OAuth yet.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Connection</th>
                    <th scope="col">Client</th>
                    <th scope="col">Agent</th>
                    <th scope="col">Approved by</th>
                    <th scope="col" className="hide-narrow">Last used</th>
                    <th scope="col" className="hide-narrow">Expires</th>
                    <th scope="col">State</th>
                    <th scope="col"><span className="sr-only">Actions</span></th>
                  </tr>
                </thead>
                <tbody>
                  {d.map((c) => (
                    <tr key={c.id} data-connection={c.id}>
                      <td data-label="Connection" className="mono small">{c.id}</td>
                      <td data-label="Client" title={c.client_id}>{c.client_name || <span className="mono small">{c.client_id}</span>}</td>
                      <td data-label="Agent"><Link to={`/agents/${pathSeg(c.agent_id)}`} className="mono">{c.agent_id}</Link></td>
                      <td data-label="Approved by" className="small">{c.granted_by} <Time ts={isoOf(c.created_at)} /></td>
                      <td data-label="Last used" className="hide-narrow"><Time ts={isoOf(c.last_used_at)} /></td>
                      <td data-label="Expires" className="hide-narrow">{c.state === "active" ? <Time ts={isoOf(expiry(c))} /> : null}</td>
                      <td data-label="State">
                        <span className={`badge badge-${TONE[c.state]}`} title={c.revoked_by ? `by ${c.revoked_by}` : undefined}>{c.state}</span>
                      </td>
                      <td>
                        {c.state === "active" ? (
                          <button
                            type="button"
                            className="btn btn-small btn-bad"
                            disabled={revoke.isPending}
                            onClick={() => {
                              if (window.confirm(`Revoke ${c.client_name || c.client_id} acting as ${c.agent_id}?`)) revoke.mutate(c.id);
                            }}
                          >
                            Revoke
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
      <Section title="Clients">
        {remove.error ? <ErrorNote error={remove.error} /> : null}
        <QueryState query={clients} what="clients" isEmpty={(d) => d.length === 0} empty="No client has registered or been fetched by its metadata document.">
          {(d) => (
            <div className="table-wrap">
              <table className="stack">
                <thead>
                  <tr>
                    <th scope="col">Client</th>
                    <th scope="col">Sends codes to</th>
                    <th scope="col" className="hide-narrow">Registered or fetched</th>
                    <th scope="col"><span className="sr-only">Actions</span></th>
                  </tr>
                </thead>
                <tbody>
                  {d.map((c) => (
                    <tr key={c.client_id}>
                      <td data-label="Client">{c.client_name || "(no name)"} <span className="mono small muted">{c.client_id}</span></td>
                      <td data-label="Sends codes to" className="mono small">{c.redirect_hosts.join(", ")}</td>
                      <td data-label="Registered" className="hide-narrow"><Time ts={isoOf(c.created_at)} /></td>
                      <td>
                        <button
                          type="button"
                          className="btn btn-small btn-ghost"
                          disabled={remove.isPending}
                          onClick={() => {
                            const again = c.client_id.startsWith("https://") ? "its document is fetched again when it next asks" : "it must register again";
                            if (window.confirm(`Delete ${c.client_name || c.client_id}? Its connections are revoked and ${again}.`)) remove.mutate(c.client_id);
                          }}
                        >
                          Delete
                        </button>
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
