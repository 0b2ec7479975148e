-- Decision facts and precedents (CONTRACT 1.16, docs/supervisor.md).

-- Decision facts on their way to memory: written in the same transaction as the approval's resolution and
-- deleted once memory has stored them, so a memory that is down, or a process that stops, loses none. Delivered
-- in `seq` order; `key` (one per approval) makes a re-sent fact an upsert of the same memory, never a second one.
CREATE TABLE IF NOT EXISTS decision_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,                -- decision.<tool>.<approval id>
    approval_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    fact TEXT NOT NULL,                      -- JSON: the signed memory_store arguments
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    last_attempt_at REAL
);

CREATE INDEX IF NOT EXISTS decision_outbox_couple ON decision_outbox (tool, agent_id);

-- `POST /approvals/precedents/forget`: decisions of this couple resolved before reset_at never count again,
-- whatever copies of them memory is given later.
CREATE TABLE IF NOT EXISTS precedent_resets (
    tool TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    reset_at REAL NOT NULL,
    reset_by TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tool, agent_id)
);

-- The precedent check reads the approvals of one agent and tool by outcome.
CREATE INDEX IF NOT EXISTS approvals_couple ON approvals (agent_id, tool, status, resolved_at);
