-- Approvals, grants, emergency stops, rate-limit events and runtime settings overrides (CONTRACT 1.4, 1.8-1.10).
-- Times are Unix epoch seconds (DOUBLE PRECISION): every worker compares them with its own clock, and views format them.

CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,                     -- 16 hex
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    params TEXT NOT NULL,                    -- JSON, unredacted
    args_digest TEXT NOT NULL,               -- sha256 of the canonical JSON of params: binds the approval to them
    trace_id TEXT NOT NULL DEFAULT '',
    policy_rule TEXT NOT NULL DEFAULT '',
    policy_version TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL DEFAULT '',
    callback_url TEXT NOT NULL DEFAULT '',
    injection_risk BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'denied', 'timeout')),
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    resolved_by TEXT NOT NULL DEFAULT '',
    resolved_at DOUBLE PRECISION,
    reasoning TEXT NOT NULL DEFAULT '',
    confidence DOUBLE PRECISION,
    used_at DOUBLE PRECISION                             -- set once, when an approved call is claimed (MCP claim flow)
);

CREATE INDEX IF NOT EXISTS approvals_pending ON approvals (status, expires_at);
CREATE INDEX IF NOT EXISTS approvals_call ON approvals (agent_id, tool, args_digest, status);
CREATE INDEX IF NOT EXISTS approvals_created ON approvals (created_at);

-- Moves on every resolution, whoever makes it: a waiter on another worker polls this one row, then its approvals.
CREATE TABLE IF NOT EXISTS approvals_clock (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);

INSERT INTO approvals_clock (id, seq) VALUES (1, 0) ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS grants (
    id TEXT PRIMARY KEY,                     -- 16 hex
    agent TEXT NOT NULL,                     -- glob
    tools TEXT NOT NULL,                     -- glob
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    granted_by TEXT NOT NULL DEFAULT '',
    approval_id TEXT NOT NULL DEFAULT '',
    trace_id TEXT NOT NULL DEFAULT '',
    revoked_at DOUBLE PRECISION,
    revoked_by TEXT NOT NULL DEFAULT '',
    halt_id TEXT NOT NULL DEFAULT ''         -- the stop that revoked it; a resume restores it while unexpired
);

CREATE INDEX IF NOT EXISTS grants_active ON grants (revoked_at, expires_at);

CREATE TABLE IF NOT EXISTS halts (
    id TEXT PRIMARY KEY,                     -- 16 hex
    scope TEXT NOT NULL CHECK (scope IN ('all', 'agent', 'session')),
    target TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    revoked_grants TEXT NOT NULL DEFAULT '[]',   -- JSON list of grant ids this stop revoked
    denied_approvals BIGINT NOT NULL DEFAULT 0,
    resumed_at DOUBLE PRECISION,
    resumed_by TEXT NOT NULL DEFAULT ''
);

CREATE INDEX IF NOT EXISTS halts_active ON halts (resumed_at);

-- Rate limiting and loop detection (CONTRACT 1.4): recent allowed calls per agent, and each agent's running total.
CREATE TABLE IF NOT EXISTS rate_events (
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    params_key TEXT NOT NULL,                -- sha256 prefix of the Go %v of the arguments
    at DOUBLE PRECISION NOT NULL
);

CREATE INDEX IF NOT EXISTS rate_events_agent ON rate_events (agent_id, at);

CREATE TABLE IF NOT EXISTS rate_totals (
    agent_id TEXT PRIMARY KEY,
    total BIGINT NOT NULL,
    last_at DOUBLE PRECISION NOT NULL
);

-- Runtime overrides of config settings (PUT /approvals/settings), effective on every worker.
CREATE TABLE IF NOT EXISTS settings_overrides (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,                     -- JSON
    updated_at DOUBLE PRECISION NOT NULL,
    updated_by TEXT NOT NULL DEFAULT ''
);
