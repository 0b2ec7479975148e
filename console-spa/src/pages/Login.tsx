// Signing in: single sign-on when the server has it, a personal token otherwise (or as well); the admin token
// in Settings still works. Who is signed in, and Log out, sit in the header on every page. A page that sent the
// person here names itself in `?next=` (an approval from an email link, a client's consent): signing in goes back
// there, by token here or through the provider (functions/login.py keeps it across the round trip).
import { useState } from "react";
import { ApiError } from "../api/client";
import { loginWithToken, logout, useLoginState, useSignedInOrOut } from "../api/people";
import { Section } from "../components/bits";
import { ErrorNote, Loading } from "../components/states";
import { Link, navigateTo, safeReturn, useLocation } from "../router";
import { meshBase } from "../settings";

export function LoginPage() {
  const q = useLoginState();
  const next = safeReturn(useLocation().query.get("next"));
  const refresh = useSignedInOrOut();
  const [token, setToken] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const state = q.data;
  const who = state?.who;

  const submit = async () => {
    setBusy(true);
    setError(null);
    try {
      await loginWithToken(token.trim());
      setToken("");
      await refresh();
      navigateTo(next ?? "/");
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <h1>Sign in</h1>
      {next && !who ? <p className="muted">After signing in you go back to the page that sent you here.</p> : null}
      {q.isPending ? <Loading what="the sign-in options" /> : q.isError ? <ErrorNote error={q.error} what="/login" /> : null}
      {who ? (
        <Section title="Signed in">
          <p role="status" className="signed-in">
            You are <strong>{who.kind === "owner" ? "the owner (admin token)" : who.name}</strong>, <span className="tag tag-role">{who.role}</span>
            {who.approve_tools.length || who.approve_agents.length ? (
              <span className="muted small">
                {" "}
                deciding {who.approve_tools.length ? who.approve_tools.join(", ") : "any tool"} for {who.approve_agents.length ? who.approve_agents.join(", ") : "any agent"}
              </span>
            ) : null}
            .
          </p>
          <div className="row">
            {next ? (
              <a href={`#${next}`} className="btn">
                Continue where you were
              </a>
            ) : (
              <Link to="/" className="btn">Go to the overview</Link>
            )}
            {who.kind === "user" ? (
              <button
                type="button"
                className="btn btn-ghost"
                onClick={() => void logout().finally(() => void refresh())}
              >
                Log out
              </button>
            ) : null}
          </div>
        </Section>
      ) : null}
      {state && !who ? (
        <>
          {state.sso ? (
            <Section title="Single sign-on">
              <p>Sign in with your organisation's account; your role in flux7 comes from it.</p>
              <a className="btn btn-big sso-button" href={`${meshBase()}/login/oidc${next ? `?next=${encodeURIComponent(next)}` : ""}`}>
                Sign in with {state.sso_label}
              </a>
            </Section>
          ) : null}
          <Section title="Personal token">
            <form
              className="form"
              onSubmit={(e) => {
                e.preventDefault();
                if (token.trim() && !busy) void submit();
              }}
            >
              <div className="field">
                <label htmlFor="login-token">Personal token</label>
                <input id="login-token" type="password" autoComplete="off" value={token} onChange={(e) => setToken(e.target.value)} aria-describedby="login-token-help" />
                <span className="help" id="login-token-help">
                  The <code>f7u_…</code> token from <code>flux7 user add</code> or <code>rotate</code>. It opens a session of {state.session_hours} hours; the token is not kept in the browser.
                </span>
              </div>
              <div className="row">
                <button type="submit" className="btn" disabled={busy || !token.trim()}>Sign in</button>
              </div>
              {error ? (
                error instanceof ApiError && error.status === 401 ? (
                  <p className="note note-error" role="alert">That token is not a live personal token (unknown, rotated away, or its user disabled).</p>
                ) : (
                  <ErrorNote error={error} />
                )
              ) : null}
            </form>
          </Section>
          <p className="muted">
            Operators with the server's admin token can also enter it in <Link to="/settings">Settings</Link>.
          </p>
        </>
      ) : null}
    </>
  );
}
