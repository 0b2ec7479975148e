-- The policy files in force, as they were when last loaded: the replica (Litestream) carries them with the rest
-- of the database, and `flux7 restore` writes them back into policy_dir (shared/policy_files.py).
CREATE TABLE policy_files (
    name TEXT PRIMARY KEY,          -- the file's name inside policy_dir, e.g. "agents.yaml"
    content BYTEA NOT NULL,          -- its bytes, exactly
    sha256 TEXT NOT NULL,
    updated_at BIGINT NOT NULL     -- unix seconds when this content was first seen in force
);
