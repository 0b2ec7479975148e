-- Per-tool rate limits (a policy's `tool_limits`): each agent's running total on each tool it is limited on.
-- The per-minute window reads rate_events, which already carries the tool.
CREATE TABLE IF NOT EXISTS rate_tool_totals (
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    total BIGINT NOT NULL,
    last_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (agent_id, tool)
);

CREATE INDEX IF NOT EXISTS rate_events_agent_tool ON rate_events (agent_id, tool, at);
