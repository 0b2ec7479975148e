-- Memory embeddings: one float32 vector per memory key, shared by every worker (shared/memory/vectors.py).
-- `model` names the vector space, so vectors from another embedder are never compared with the current one's.
-- `text_sha256` lets an unchanged text skip re-embedding.
CREATE TABLE IF NOT EXISTS memory_vectors (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dim BIGINT NOT NULL CHECK (dim > 0),
    vector BYTEA NOT NULL CHECK (length(vector) = 4 * dim),
    text_sha256 TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
);

-- One row whose counter moves on every change to memory_vectors, whoever makes it: a worker compares it with the
-- version its matrix cache was built from, one cheap read per search.
CREATE TABLE IF NOT EXISTS memory_vectors_version (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);

INSERT INTO memory_vectors_version (id, version) VALUES (1, 0) ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION memory_vectors_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_vectors_version SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER memory_vectors_changed AFTER INSERT OR UPDATE OR DELETE ON memory_vectors
    FOR EACH ROW EXECUTE FUNCTION memory_vectors_bump();

-- pgvector, where the server has it: later migrations may index vectors with it; without it the vectors stay
-- float32 bytes above and search scans them exactly (as on SQLite).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        CREATE EXTENSION IF NOT EXISTS vector;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pgvector is available but this role may not create it; vectors are scanned exactly';
END;
$$;
