-- Approvals where people are (docs/approvals.md "Notifications"): Slack, email, escalation, signed webhooks.

-- Every notification on its way out (the operator's webhook, Slack posts and updates, emails): written in the
-- transaction that queues or settles its approval, so a restart loses none, and delivered in `seq` order within
-- its lane by whichever worker claims the lane's head (`claimed_until`, a lease). Delivered rows are deleted; a
-- row that failed `notify.max_attempts` times stays as `failed`.
CREATE TABLE IF NOT EXISTS notify_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    lane TEXT NOT NULL,                      -- webhook | slack | email
    kind TEXT NOT NULL,                      -- webhook | slack.post | slack.update | email
    approval_id TEXT NOT NULL DEFAULT '',
    payload TEXT NOT NULL,                   -- JSON
    status TEXT NOT NULL DEFAULT 'queued',   -- queued | failed
    created_at REAL NOT NULL,
    next_attempt_at REAL NOT NULL,
    claimed_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS notify_outbox_lane ON notify_outbox (lane, status, seq);
CREATE INDEX IF NOT EXISTS notify_outbox_approval ON notify_outbox (approval_id);

-- The Slack messages posted for an approval, updated when it is settled.
CREATE TABLE IF NOT EXISTS notify_slack_messages (
    approval_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    ts TEXT NOT NULL,
    posted_at REAL NOT NULL,
    PRIMARY KEY (approval_id, channel, ts)
);

-- Escalations due: step N of an approval tells its N-th route at due_at unless it is settled by then. Claimed
-- (claimed_at) in the transaction that queues the route's notifications: one worker escalates, once.
CREATE TABLE IF NOT EXISTS notify_escalations (
    approval_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    due_at REAL NOT NULL,
    claimed_at REAL,
    PRIMARY KEY (approval_id, step)
);
CREATE INDEX IF NOT EXISTS notify_escalations_due ON notify_escalations (due_at);

-- Email links that were followed: a link works once.
CREATE TABLE IF NOT EXISTS notify_used_links (
    link_id TEXT PRIMARY KEY,
    approval_id TEXT NOT NULL,
    used_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
