-- flux7 as the OAuth 2.1 authorization server of its /mcp (docs/managed-agents.md): clients registered
-- dynamically (RFC 7591), authorization requests waiting for a named human's consent, authorization codes, and
-- the connections a consent grants with their access and refresh tokens. Secrets are kept only as SHA-256s.
CREATE TABLE IF NOT EXISTS oauth_clients (
    client_id TEXT PRIMARY KEY,
    secret_hash TEXT,                        -- NULL: a public client (token_endpoint_auth_method none)
    name TEXT NOT NULL DEFAULT '',
    metadata TEXT NOT NULL,                  -- JSON: the registered metadata, as the registration answered it
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS oauth_requests (
    id TEXT PRIMARY KEY,                     -- 'orq_' + 32 hex: what the console's consent page names
    client_id TEXT NOT NULL,
    issuer TEXT NOT NULL,                    -- the issuer the client discovered (the `iss` of the answer)
    params TEXT NOT NULL,                    -- JSON: the authorization request's parameters
    agent_id TEXT NOT NULL,                  -- proposed from the client's name, the human may pick another
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    decision TEXT NOT NULL DEFAULT '',       -- '' (pending), approved, denied
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at REAL
);
CREATE TABLE IF NOT EXISTS oauth_codes (
    code_hash TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    code_challenge_method TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    granted_by TEXT NOT NULL,
    granted_user TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    used_at REAL,                            -- exchanged: presenting it again revokes what it granted
    connection_id TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS oauth_connections (
    id TEXT PRIMARY KEY,                     -- 'otk_' + 12 hex: a connection: one consent, every token refreshed from it
    client_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,                  -- the agent the human consented to
    granted_by TEXT NOT NULL,                -- the consenting human (user:<name>, owner:admin-token)
    granted_user TEXT NOT NULL DEFAULT '',   -- that user's name: a disabled user's connections stop working
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,                  -- the audience: this server's MCP URL
    request_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL,
    revoked_by TEXT NOT NULL DEFAULT '',
    last_used_at REAL
);
CREATE INDEX IF NOT EXISTS oauth_connections_client ON oauth_connections (client_id);
CREATE INDEX IF NOT EXISTS oauth_connections_agent ON oauth_connections (agent_id);
CREATE TABLE IF NOT EXISTS oauth_tokens (
    access_hash TEXT PRIMARY KEY,
    connection_id TEXT NOT NULL,
    refresh_hash TEXT UNIQUE,
    access_expires_at REAL NOT NULL,
    refresh_expires_at REAL,
    created_at REAL NOT NULL,
    rotated_at REAL                          -- its refresh token was used: presenting it again revokes the connection
);
CREATE INDEX IF NOT EXISTS oauth_tokens_connection ON oauth_tokens (connection_id);
