-- Memory full-text search on PostgreSQL (shared/memory/fts_postgresql.py; docs/memory.md "Ranking on PostgreSQL").
-- Replaces 0003's unweighted column with two weighted ones, one per text search configuration a deployment may
-- choose (memory.text_search_config): `fts` ('simple': lower-casing only, as FTS5's unicode61) and `fts_english`
-- (Snowball stems and stop words). Each column's words are weighted as FTS5's bm25 weights them: object A,
-- entity B, tags C, predicate D. Text is split into runs of letters and digits first, as unicode61 splits it, so
-- `conv-26.session_1.t005` is the four words `conv 26 session 1 t005` on both engines (PostgreSQL's own parser
-- would keep `conv-26.session` as one host-name-like token).

CREATE OR REPLACE FUNCTION memory_fts_words(text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT regexp_replace($1, '[^[:alnum:]]+', ' ', 'g') $$;

DROP INDEX IF EXISTS facts_fts;
ALTER TABLE facts DROP COLUMN IF EXISTS fts;

ALTER TABLE facts ADD COLUMN fts tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('simple', memory_fts_words(entity)), 'B')
    || setweight(to_tsvector('simple', memory_fts_words(predicate)), 'D')
    || setweight(to_tsvector('simple', memory_fts_words(object)), 'A')
    || setweight(to_tsvector('simple', memory_fts_words(tags)), 'C')
) STORED;

ALTER TABLE facts ADD COLUMN fts_english tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', memory_fts_words(entity)), 'B')
    || setweight(to_tsvector('english', memory_fts_words(predicate)), 'D')
    || setweight(to_tsvector('english', memory_fts_words(object)), 'A')
    || setweight(to_tsvector('english', memory_fts_words(tags)), 'C')
) STORED;

CREATE INDEX IF NOT EXISTS facts_fts ON facts USING GIN (fts);
CREATE INDEX IF NOT EXISTS facts_fts_english ON facts USING GIN (fts_english);

-- Vectors ranked in the database where pgvector is installed (0004 creates the extension when the server has it):
-- an `embedding` column beside the float32 bytes, filled on write (shared/memory/vectors_pgvector.py). Without the
-- extension the table stays as on SQLite and each instance scans its own matrix.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS embedding vector;
    END IF;
END;
$$;
