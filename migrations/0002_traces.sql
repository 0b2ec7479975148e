-- Traces (CONTRACT 1.11): every chained line verbatim, the current state of each call, the chain head,
-- running counts for /health, and the /metrics series. Everything a restore needs is here: the JSONL file
-- can be re-exported from trace_lines.

-- Every line of the chain, exactly as written to the JSONL file (updates are new lines).
CREATE TABLE trace_lines (
    seq INTEGER PRIMARY KEY,
    line BLOB NOT NULL
);

-- One row per call; line_seq points at its newest revision. A trace id may repeat: a client that propagates
-- one traceparent across calls shares it, and revision 0 is always a new call.
CREATE TABLE traces (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    agent_id TEXT NOT NULL DEFAULT '',
    tool TEXT NOT NULL DEFAULT '',
    ts_ns INTEGER NOT NULL,
    line_seq INTEGER NOT NULL REFERENCES trace_lines (seq)
);
CREATE INDEX traces_trace_id ON traces (trace_id, id);
CREATE INDEX traces_agent ON traces (agent_id, id);
CREATE INDEX traces_tool ON traces (tool, id);
CREATE INDEX traces_session ON traces (session_id, id) WHERE session_id != '';

-- The head of the chain, taken and advanced inside the write transaction that inserts the line, so every
-- worker process extends one chain.
CREATE TABLE trace_chain (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO trace_chain (id, seq, hash) VALUES (1, 0, '');

-- /health counts, kept current by record and update (deltas), so /health never scans the table.
CREATE TABLE trace_stats (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    total INTEGER NOT NULL DEFAULT 0,
    allowed INTEGER NOT NULL DEFAULT 0,
    denied INTEGER NOT NULL DEFAULT 0,
    human_approval INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    estimated_input_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_output_tokens INTEGER NOT NULL DEFAULT 0
);
INSERT INTO trace_stats (id) VALUES (1);

-- /metrics: counters, histogram buckets (one row per bucket, not cumulative), sums and counts, shared by
-- every worker.
CREATE TABLE metric_values (
    name TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '',
    value REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
