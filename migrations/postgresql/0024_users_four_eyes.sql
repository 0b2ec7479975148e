-- Named humans (docs/security.md "Users and roles"): users with a role and, for approvers, the tools and agents
-- they may decide; their personal tokens (stored hashed); console sessions (a login by token or single sign-on);
-- four eyes: each approval says how many distinct humans it needs and keeps every vote; a call's preview (a diff)
-- travels with its approval, and the user on whose behalf the agent called (a JWT's user claim) is kept so that
-- user never approves it.
CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    approve_tools TEXT NOT NULL DEFAULT '[]',
    approve_agents TEXT NOT NULL DEFAULT '[]',
    email TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL DEFAULT 'local',
    created_at DOUBLE PRECISION NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    disabled_at DOUBLE PRECISION
);
CREATE TABLE IF NOT EXISTS user_tokens (
    id TEXT PRIMARY KEY,
    user_name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION,
    last_used_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS user_tokens_user ON user_tokens (user_name);
CREATE TABLE IF NOT EXISTS console_sessions (
    id_hash TEXT PRIMARY KEY,
    user_name TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS approval_votes (
    approval_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    decision TEXT NOT NULL,
    reasoning TEXT NOT NULL DEFAULT '',
    at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (approval_id, actor)
);
ALTER TABLE approvals ADD COLUMN required_approvals BIGINT NOT NULL DEFAULT 1;
ALTER TABLE approvals ADD COLUMN preview TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN requester_user TEXT NOT NULL DEFAULT '';
