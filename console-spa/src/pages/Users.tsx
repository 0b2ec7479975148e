// The server's users (owners and admins read them; owners add, disable and rotate). A new personal token is
// shown once, here, and never again.
import { useState } from "react";
import { useAction } from "../api/actions";
import { addUser, disableUser, rotateUser, useLoginState, useUsers, type UserView } from "../api/people";
import { SignInLink } from "../router";
import { Section } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { globProblem } from "../lib/glob";
import { manageUsers, readsUsers } from "../lib/people";

const ROLES = ["viewer", "approver", "admin", "owner"];
const list = (s: string) => s.split(",").map((x) => x.trim()).filter(Boolean);

function NewToken({ u }: { u: UserView }) {
  return u.token ? (
    <div className="note note-ok new-token" role="status">
      <p>
        The personal token of <strong>{u.name}</strong>, shown this once: give it to them now.
      </p>
      <pre className="code" aria-label={`Personal token of ${u.name}`}>{u.token}</pre>
    </div>
  ) : null;
}

export function UsersPage() {
  const state = useLoginState();
  const who = state.data?.who ?? null;
  const owner = !!who && manageUsers(who);
  const q = useUsers(!!who && readsUsers(who));
  const [form, setForm] = useState({ name: "", role: "viewer", tools: "", agents: "", email: "" });
  const [issued, setIssued] = useState<UserView | null>(null);
  const add = useAction(
    (f: typeof form) => addUser({ name: f.name.trim(), role: f.role, approve_tools: list(f.tools), approve_agents: list(f.agents), email: f.email.trim() }),
    [["users"]],
    (u) => {
      setIssued(u);
      setForm({ name: "", role: "viewer", tools: "", agents: "", email: "" });
    },
  );
  const disable = useAction((name: string) => disableUser(name), [["users"]]);
  const rotate = useAction((name: string) => rotateUser(name), [["users"]], (u) => setIssued(u));
  const scoped = form.role === "approver";
  const globError = scoped ? [...list(form.tools), ...list(form.agents)].map(globProblem).find(Boolean) : "";
  if (!who || !readsUsers(who)) {
    return (
      <>
        <h1>Users</h1>
        {state.isPending ? null : who ? (
          <p className="note">Only admins and owners see the users.</p>
        ) : (
          <p className="note">
            <SignInLink>Sign in</SignInLink> as an admin or an owner to see the users.
          </p>
        )}
      </>
    );
  }
  return (
    <>
      <h1>Users</h1>
      {issued ? <NewToken u={issued} /> : null}
      {owner ? (
        <Section title="Add a user">
          <form
            className="form form-row"
            onSubmit={(e) => {
              e.preventDefault();
              if (!globError) add.mutate(form);
            }}
          >
            <div className="field">
              <label htmlFor="u-name">Name</label>
              <input id="u-name" required value={form.name} onChange={(e) => setForm({ ...form, name: e.target.value })} placeholder="alice" />
            </div>
            <div className="field">
              <label htmlFor="u-role">Role</label>
              <select id="u-role" value={form.role} onChange={(e) => setForm({ ...form, role: e.target.value })}>
                {ROLES.map((r) => (
                  <option key={r} value={r}>{r}</option>
                ))}
              </select>
            </div>
            {scoped ? (
              <>
                <div className="field">
                  <label htmlFor="u-tools">Approves tools (globs, comma-separated)</label>
                  <input id="u-tools" value={form.tools} onChange={(e) => setForm({ ...form, tools: e.target.value })} placeholder="any" />
                </div>
                <div className="field">
                  <label htmlFor="u-agents">For agents (globs)</label>
                  <input id="u-agents" value={form.agents} onChange={(e) => setForm({ ...form, agents: e.target.value })} placeholder="any" />
                </div>
              </>
            ) : null}
            <div className="field">
              <label htmlFor="u-email">Email (optional)</label>
              <input id="u-email" type="email" value={form.email} onChange={(e) => setForm({ ...form, email: e.target.value })} />
            </div>
            <div className="row">
              <button type="submit" className="btn" disabled={add.isPending || !form.name.trim() || !!globError}>Add</button>
            </div>
            {globError ? <span className="field-error" role="alert">Not a valid glob: {globError}.</span> : null}
          </form>
          {add.error ? <ErrorNote error={add.error} /> : null}
        </Section>
      ) : null}
      <Section title="Users">
        {disable.error ? <ErrorNote error={disable.error} /> : rotate.error ? <ErrorNote error={rotate.error} /> : null}
        <QueryState query={q} what="users" isEmpty={(d) => d.length === 0} empty="No user yet: the admin token is the only way in. Add one above, or with flux7 user add.">
          {(users) => (
            <div className="table-wrap">
              <table className="stack users">
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Role</th>
                    <th scope="col">Scope</th>
                    <th scope="col">From</th>
                    <th scope="col">State</th>
                    {owner ? <th scope="col"><span className="sr-only">Actions</span></th> : null}
                  </tr>
                </thead>
                <tbody>
                  {users.map((u) => (
                    <tr key={u.name} data-user={u.name}>
                      <td data-label="Name">{u.name}{u.email ? <div className="muted small">{u.email}</div> : null}</td>
                      <td data-label="Role"><span className="tag tag-role">{u.role}</span></td>
                      <td data-label="Scope" className="small mono">
                        {u.role === "approver" ? `${u.approve_tools.join(", ") || "any tool"} · ${u.approve_agents.join(", ") || "any agent"}` : "–"}
                      </td>
                      <td data-label="From" className="small">{u.source === "oidc" ? "single sign-on" : "local"}{u.created_by ? <span className="muted"> · by {u.created_by}</span> : null}</td>
                      <td data-label="State">{u.disabled ? <span className="badge badge-bad">disabled</span> : <span className="badge badge-ok">active</span>}</td>
                      {owner ? (
                        <td data-label="">
                          {!u.disabled ? (
                            <div className="row">
                              {u.source !== "oidc" ? (
                                <button type="button" className="btn btn-small" disabled={rotate.isPending} onClick={() => rotate.mutate(u.name)}>
                                  Rotate token
                                </button>
                              ) : null}
                              <button
                                type="button"
                                className="btn btn-small btn-bad"
                                disabled={disable.isPending}
                                onClick={() => {
                                  if (window.confirm(`Disable ${u.name}? Their tokens and sessions stop working at once.`)) disable.mutate(u.name);
                                }}
                              >
                                Disable
                              </button>
                            </div>
                          ) : null}
                        </td>
                      ) : null}
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
