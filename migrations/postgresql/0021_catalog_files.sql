-- The catalog files in force, as policy_files holds the policy files (shared/policy_files.py): on PostgreSQL the
-- deployment's catalog, which every instance writes into its own catalog_dir (shared/governance/catalog.py).
CREATE TABLE catalog_files (
    name TEXT PRIMARY KEY,          -- the file's name inside catalog_dir, e.g. "claude.yaml"
    content BYTEA NOT NULL,         -- its bytes, exactly
    sha256 TEXT NOT NULL,
    updated_at BIGINT NOT NULL      -- unix seconds when this content was first seen in force
);
