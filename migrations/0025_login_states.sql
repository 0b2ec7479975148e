-- Single sign-on (docs/security.md "Single sign-on"): a login started at GET /login/oidc and not yet back from the
-- provider. Keyed by a hash of its `state` (the browser holds the state itself in a short-lived cookie); the
-- nonce and the PKCE code verifier never leave the server. Used once, then deleted; expired ones are swept.
CREATE TABLE IF NOT EXISTS login_states (
    state_hash TEXT PRIMARY KEY,
    nonce TEXT NOT NULL,
    code_verifier TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
