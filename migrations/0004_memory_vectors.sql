-- Memory embeddings: one float32 vector per memory key, shared by every worker (shared/memory/vectors.py).
-- `model` names the vector space, so vectors from another embedder are never compared with the current one's.
-- `text_sha256` lets an unchanged text skip re-embedding.
CREATE TABLE IF NOT EXISTS memory_vectors (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL CHECK (dim > 0),
    vector BLOB NOT NULL CHECK (length(vector) = 4 * dim),
    text_sha256 TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ'))
);

-- One row whose counter moves on every change to memory_vectors, whoever makes it: a worker compares it with the
-- version its matrix cache was built from, one cheap read per search.
CREATE TABLE IF NOT EXISTS memory_vectors_version (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);

INSERT OR IGNORE INTO memory_vectors_version (id, version) VALUES (1, 0);

CREATE TRIGGER IF NOT EXISTS memory_vectors_ai AFTER INSERT ON memory_vectors BEGIN
    UPDATE memory_vectors_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER IF NOT EXISTS memory_vectors_au AFTER UPDATE ON memory_vectors BEGIN
    UPDATE memory_vectors_version SET version = version + 1 WHERE id = 1;
END;

CREATE TRIGGER IF NOT EXISTS memory_vectors_ad AFTER DELETE ON memory_vectors BEGIN
    UPDATE memory_vectors_version SET version = version + 1 WHERE id = 1;
END;
