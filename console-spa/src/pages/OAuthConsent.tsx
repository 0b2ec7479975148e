// The consent page: a client (Claude, ChatGPT, an MCP SDK) asked to connect by OAuth, and /oauth/authorize sent
// the browser here. A human with the right role (owner, admin) picks the agent id the connection acts as and
// approves, or denies; either way the browser goes on to the client's redirect URI.
import { useState } from "react";
import { useAction } from "../api/actions";
import { ApiError, mesh, seg } from "../api/client";
import { agentIdProblem, isoOf, useConsentRequest, type ConsentDecision } from "../api/oauth";
import { Section, Time } from "../components/bits";
import { ErrorNote, Loading } from "../components/states";
import { Link, SignInLink, useLocation } from "../router";

/** Where the browser goes after a decision (a seam for tests: jsdom does not navigate). */
export const leave = { to: (url: string) => window.location.assign(url) };

export function OAuthConsentPage() {
  const loc = useLocation();
  const id = loc.query.get("request") ?? "";
  const [agent, setAgent] = useState<string | null>(null);
  const q = useConsentRequest(id, agent?.trim() ?? "");
  const [done, setDone] = useState<ConsentDecision | null>(null);
  const decide = useAction(
    (v: { decision: "approve" | "deny"; agent: string }) =>
      mesh.post<ConsentDecision>(`/oauth/requests/${seg(id)}/${v.decision}`, v.decision === "approve" ? { agent: v.agent } : {}),
    [["oauth-request"], ["oauth-connections"]],
    (r) => {
      setDone(r);
      leave.to(r.redirect_to);
    },
  );
  if (!id) {
    return (
      <>
        <h1>Connect a client</h1>
        <div className="note note-empty">No authorization request named. A client that connects by OAuth sends you here.</div>
      </>
    );
  }
  if (q.isPending) return <Loading what="the authorization request" />;
  if (q.isError && !q.data) {
    const signIn = q.error instanceof ApiError && q.error.status === 401;
    return (
      <>
        <h1>Connect a client</h1>
        <ErrorNote error={q.error} what="the authorization request" />
        {signIn ? (
          <p className="note note-warn">
            <SignInLink>Sign in</SignInLink> and you come back here (or set the admin token in{" "}
            <Link to="/settings">Settings</Link>, then come back to{" "}
            <Link to="/oauth/consent" query={{ request: id }}>this request</Link>): it waits a few minutes for you.
          </p>
        ) : null}
      </>
    );
  }
  const r = q.data!;
  const chosen = agent ?? r.proposed_agent;
  const problem = agentIdProblem(chosen.trim());
  const client = r.client;
  const name = client.client_name || client.client_id;
  const published = client.client_id.startsWith("https://") ? new URL(client.client_id).host : "";
  return (
    <>
      <h1>Connect {name}?</h1>
      <p className="muted">
        <strong>{name}</strong> asks to call this server&apos;s tools as an agent. Approve only a connection you started
        yourself: the client gets tokens that act as the agent below, governed by its policies, approvals and limits,
        until you revoke them on the <Link to="/connections">Connections</Link> page.
      </p>
      {r.state !== "pending" ? (
        <div className={`note ${r.state === "approved" ? "note-ok" : "note-warn"}`} role="status">
          This request is <strong>{r.state}</strong>
          {r.decided_by ? <> by <span className="mono">{r.decided_by}</span></> : null}.{" "}
          {r.state === "expired" ? "Start the connection again from the client." : null}
        </div>
      ) : null}
      {done ? (
        <p className="note note-ok" role="status">
          {done.state === "approved" ? "Approved" : "Denied"}: sending you back to <span className="mono">{r.redirect_host}</span>…
        </p>
      ) : null}
      <div className="grid-2">
        <Section title="The client">
          <dl className="facts">
            <dt>Name</dt>
            <dd>{client.client_name ? client.client_name : <span className="muted">(none given)</span>}</dd>
            <dt>Sends you back to</dt>
            <dd>
              <strong className="mono">{r.redirect_host}</strong>
              <div className="mono small muted">{r.redirect_uri}</div>
            </dd>
            {published ? (
              <>
                {/* a Client ID Metadata Document: the site that serves it vouches for the name */}
                <dt>Published by</dt>
                <dd>
                  <strong className="mono">{published}</strong>
                  <div className="mono small muted">{client.client_id}</div>
                </dd>
                <dt>Fetched</dt>
              </>
            ) : (
              <dt>Registered</dt>
            )}
            <dd>{client.deleted ? <span className="muted">deleted since</span> : <Time ts={isoOf(client.created_at)} />}</dd>
            {client.client_uri ? (
              <>
                <dt>Web site</dt>
                <dd className="mono small">{client.client_uri}</dd>
              </>
            ) : null}
            {client.software_id ? (
              <>
                <dt>Software</dt>
                <dd className="mono small">{client.software_id} {client.software_version ?? ""}</dd>
              </>
            ) : null}
            {published ? null : (
              <>
                <dt>Client id</dt>
                <dd className="mono small">{client.client_id}</dd>
              </>
            )}
            <dt>Asked</dt>
            <dd><Time ts={isoOf(r.created_at)} /> (expires <Time ts={isoOf(r.expires_at)} />)</dd>
          </dl>
        </Section>
        <Section title="What it gets">
          <dl className="facts">
            <dt>Scope</dt>
            <dd>
              <span className="mono">{r.scopes.join(" ")}</span>: call tools on <span className="mono">{r.resource}</span> (and{" "}
              <span className="mono">/tool</span>, <span className="mono">/decide</span>) as the agent below
              {r.requested_scope && r.requested_scope !== r.scopes.join(" ") ? (
                <div className="muted small">It asked for <span className="mono">{r.requested_scope}</span>; only this is granted.</div>
              ) : null}
            </dd>
            <dt>Policies</dt>
            <dd>
              {r.policies.length ? (
                <ul className="plain">
                  {r.policies.map((p) => (
                    <li key={p.name}>
                      <span className="mono">{p.name}</span> <span className="muted small">(agent {p.agent})</span>
                    </li>
                  ))}
                </ul>
              ) : (
                <span className="note-warn">No policy covers this agent id: every call would be denied.</span>
              )}
            </dd>
            <dt>Other connections</dt>
            <dd>{r.active_connections ? `${r.active_connections} active as this agent` : "none as this agent"}</dd>
          </dl>
        </Section>
      </div>
      {r.state === "pending" && !done ? (
        <Section title="Your decision">
          <form
            className="form"
            onSubmit={(e) => {
              e.preventDefault();
              if (!problem) decide.mutate({ decision: "approve", agent: chosen.trim() });
            }}
          >
            <div className="field">
              <label htmlFor="c-agent">Acts as agent</label>
              <input
                id="c-agent"
                required
                value={chosen}
                aria-invalid={problem ? true : undefined}
                aria-describedby={problem ? "c-agent-problem c-agent-help" : "c-agent-help"}
                onChange={(e) => setAgent(e.target.value)}
              />
              {problem ? <span className="field-error" id="c-agent-problem" role="alert">{problem}</span> : null}
              <span className="help" id="c-agent-help">
                Proposed from the client&apos;s name. Policies, grants, limits and traces are per agent id.
              </span>
            </div>
            <div className="row">
              <button type="submit" className="btn" disabled={decide.isPending || !!problem}>Approve</button>
              <button
                type="button"
                className="btn btn-bad"
                disabled={decide.isPending}
                onClick={() => decide.mutate({ decision: "deny", agent: "" })}
              >
                Deny
              </button>
            </div>
          </form>
          {decide.error ? <ErrorNote error={decide.error} /> : null}
        </Section>
      ) : null}
    </>
  );
}
