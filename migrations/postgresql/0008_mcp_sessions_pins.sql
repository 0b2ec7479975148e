-- MCP sessions (Streamable HTTP, 2025-11-25 and older revisions): valid on every worker and after a restart.
-- The caller is fixed by the request that opened the session (CONTRACT 1.14).
CREATE TABLE IF NOT EXISTS mcp_sessions (
    id TEXT PRIMARY KEY,                     -- 32 hex, minted by initialize
    agent_id TEXT NOT NULL,
    user_id TEXT NOT NULL DEFAULT '',
    authenticated BIGINT NOT NULL DEFAULT 0,
    via_jwt BIGINT NOT NULL DEFAULT 0,
    protocol_version TEXT NOT NULL DEFAULT '',
    client_name TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL
);

CREATE INDEX IF NOT EXISTS mcp_sessions_last_seen ON mcp_sessions (last_seen);

-- Approvals opened by a non-blocking MCP tools/call: nobody waits on them, so approval.resolve may replay them.
CREATE TABLE IF NOT EXISTS mcp_claimable (
    approval_id TEXT PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL
);

-- Tool pinning (pin_tools): the accepted fingerprint of each upstream tool's definition.
CREATE TABLE IF NOT EXISTS tool_pins (
    tool TEXT PRIMARY KEY,                   -- the mesh's name, <server>.<tool>
    server TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL,               -- sha256 hex of ToolDef.fingerprint_text()
    description TEXT NOT NULL DEFAULT '',
    pinned_at DOUBLE PRECISION NOT NULL,
    pinned_by TEXT NOT NULL DEFAULT ''
);
