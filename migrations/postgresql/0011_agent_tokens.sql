-- Per-agent bearer tokens (issue 13 item 5): only a SHA-256 of each token is kept; the token itself is shown once.
CREATE TABLE IF NOT EXISTS agent_tokens (
    id TEXT PRIMARY KEY,                     -- 'tok_' + 12 hex: what `flux7 token list` shows and revoke takes
    agent_id TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,         -- sha256 hex of the whole token
    prefix TEXT NOT NULL,                    -- the token's first 12 characters, to recognise it
    note TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,                         -- NULL: never
    revoked_at DOUBLE PRECISION,                         -- NULL: live
    last_used_at DOUBLE PRECISION
);

CREATE INDEX IF NOT EXISTS agent_tokens_agent ON agent_tokens (agent_id);

-- An MCP session remembers whether its opener proved its identity (agent token or JWT), so a later request
-- must prove the same identity as strongly to use it.
ALTER TABLE mcp_sessions ADD COLUMN via_token BIGINT NOT NULL DEFAULT 0;
