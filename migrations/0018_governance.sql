-- Governance (docs/governance.md): the agent catalog's lifecycle, versions of what the control plane and
-- pinning saw, behaviour counts folded in incrementally from the trace, findings, scores over time, drafts.

-- The lifecycle state of each catalog entry (its id, exact or glob), and every transition: who, when, why.
CREATE TABLE IF NOT EXISTS agent_lifecycle (
    entry_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,            -- proposed | active | suspended | retired
    changed_at REAL NOT NULL,
    changed_by TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS agent_lifecycle_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    entry_id TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    at REAL NOT NULL,
    by TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS agent_lifecycle_events_entry ON agent_lifecycle_events (entry_id, id);

-- Every version seen of a policy file, a catalog file or an upstream tool definition (the diff engine's input).
CREATE TABLE IF NOT EXISTS governance_versions (
    kind TEXT NOT NULL,             -- policy | catalog | tool
    name TEXT NOT NULL,             -- file name, or the tool's mesh name
    version INTEGER NOT NULL,       -- 1, 2, ... per (kind, name)
    content TEXT NOT NULL,          -- '' marks a removal
    sha256 TEXT NOT NULL,
    at REAL NOT NULL,
    by TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (kind, name, version)
);

-- How far the trace has been folded into the counts below (trace_lines.seq).
CREATE TABLE IF NOT EXISTS governance_cursor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    line_seq INTEGER NOT NULL DEFAULT 0,
    evaluated_at REAL NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO governance_cursor (id) VALUES (1);

-- Per agent, tool and UTC day: what the agent did (one row per call's events, never a rescan of the trace).
CREATE TABLE IF NOT EXISTS governance_activity (
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    day INTEGER NOT NULL,           -- unix day number
    calls INTEGER NOT NULL DEFAULT 0,
    denials INTEGER NOT NULL DEFAULT 0,
    approvals_refused INTEGER NOT NULL DEFAULT 0,
    approvals_timed_out INTEGER NOT NULL DEFAULT 0,
    rate_limited INTEGER NOT NULL DEFAULT 0,
    loops INTEGER NOT NULL DEFAULT 0,
    injection INTEGER NOT NULL DEFAULT 0,
    upstream_errors INTEGER NOT NULL DEFAULT 0,
    last_ns INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent_id, tool, day)
) WITHOUT ROWID;

-- The trace ids behind each counted event (evidence), newest kept.
CREATE TABLE IF NOT EXISTS governance_evidence (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    tool TEXT NOT NULL DEFAULT '',
    ts_ns INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS governance_evidence_agent ON governance_evidence (agent_id, kind, ts_ns);

-- A finding that holds: how often it was seen in a row, its severity after escalation.
CREATE TABLE IF NOT EXISTS governance_findings (
    agent_id TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    base_severity TEXT NOT NULL,
    severity TEXT NOT NULL,
    occurrences INTEGER NOT NULL DEFAULT 1,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    counted_at REAL NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    remediation TEXT NOT NULL DEFAULT '',
    evidence TEXT NOT NULL DEFAULT '[]',
    resolved_at REAL,
    PRIMARY KEY (agent_id, rule_id)
) WITHOUT ROWID;

-- Scores over time: one row per agent per evaluation that changed something (or per hour).
CREATE TABLE IF NOT EXISTS governance_scores (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL,
    at REAL NOT NULL,
    capability INTEGER NOT NULL,
    behaviour INTEGER NOT NULL,
    hygiene INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    evidence TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS governance_scores_agent ON governance_scores (agent_id, id);

-- Proposed policy sets (control-plane drafts), replayed before they are applied.
CREATE TABLE IF NOT EXISTS governance_drafts (
    name TEXT PRIMARY KEY,
    files TEXT NOT NULL,            -- JSON {"<file>.yaml": "<text>" | null (removal)}
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    applied_at REAL
);
