-- mem7: the index (CONTRACT 2.8, bitemporal per 2.7), the journal of the workspace, the chain head.
-- Times are epoch seconds. A fact row is one version of a key: tx_to IS NULL while it is believed.

CREATE TABLE IF NOT EXISTS facts (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  entity        TEXT    NOT NULL,
  predicate     TEXT    NOT NULL DEFAULT 'note',
  object        TEXT    NOT NULL,
  tags          TEXT    NOT NULL DEFAULT '[]',
  agent         TEXT    NOT NULL DEFAULT '',
  trace_id      TEXT    NOT NULL DEFAULT '',
  ttl           INTEGER NOT NULL DEFAULT 0,
  expires_at    INTEGER,
  source_file   TEXT    NOT NULL DEFAULT '',
  source_line   INTEGER NOT NULL DEFAULT 0,
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL,
  deleted_at    INTEGER,
  valid_from    INTEGER NOT NULL,
  valid_to      INTEGER,
  tx_from       INTEGER NOT NULL,
  tx_to         INTEGER,
  access_count  INTEGER NOT NULL DEFAULT 0,
  last_accessed INTEGER
);
CREATE INDEX IF NOT EXISTS facts_current_entity ON facts(entity) WHERE tx_to IS NULL;
CREATE INDEX IF NOT EXISTS facts_current_updated ON facts(updated_at) WHERE tx_to IS NULL;
CREATE INDEX IF NOT EXISTS facts_current_agent ON facts(agent) WHERE tx_to IS NULL;
CREATE INDEX IF NOT EXISTS facts_entity_tx ON facts(entity, tx_from);

CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(
  entity, predicate, object, tags,
  content='facts', content_rowid='id'
);

CREATE TRIGGER IF NOT EXISTS facts_ai AFTER INSERT ON facts BEGIN
  INSERT INTO facts_fts(rowid, entity, predicate, object, tags)
  VALUES (new.id, new.entity, new.predicate, new.object, new.tags);
END;

CREATE TRIGGER IF NOT EXISTS facts_ad AFTER DELETE ON facts BEGIN
  INSERT INTO facts_fts(facts_fts, rowid, entity, predicate, object, tags)
  VALUES ('delete', old.id, old.entity, old.predicate, old.object, old.tags);
END;

CREATE TRIGGER IF NOT EXISTS facts_au AFTER UPDATE OF entity, predicate, object, tags ON facts BEGIN
  INSERT INTO facts_fts(facts_fts, rowid, entity, predicate, object, tags)
  VALUES ('delete', old.id, old.entity, old.predicate, old.object, old.tags);
  INSERT INTO facts_fts(rowid, entity, predicate, object, tags)
  VALUES (new.id, new.entity, new.predicate, new.object, new.tags);
END;

CREATE TABLE IF NOT EXISTS fact_tags (
  fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
  tag     TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS fact_tags_tag ON fact_tags(tag, fact_id);
CREATE INDEX IF NOT EXISTS fact_tags_fact ON fact_tags(fact_id);

-- One row per believed key, with its newest version's expiry: counting live entries stays O(1) in the
-- number of permanent keys (a COUNT(*) over this table), whatever the history in facts.
CREATE TABLE IF NOT EXISTS memory_keys (
  entity     TEXT PRIMARY KEY,
  expires_at INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_keys_expiring ON memory_keys(expires_at) WHERE expires_at IS NOT NULL;

-- Every byte mem7 appends to the workspace, in order, so `mem7 export` can re-create it after a restore.
CREATE TABLE IF NOT EXISTS memory_journal (
  seq     INTEGER PRIMARY KEY AUTOINCREMENT,
  file    TEXT    NOT NULL,
  offset  INTEGER NOT NULL,
  chunk   BLOB    NOT NULL,
  op      TEXT    NOT NULL DEFAULT '',
  entity  TEXT    NOT NULL DEFAULT '',
  hash    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS memory_journal_file ON memory_journal(file, seq);

-- What the index and journal hold of each daily file: a file longer than this has entries to adopt.
CREATE TABLE IF NOT EXISTS memory_files (
  name  TEXT PRIMARY KEY,
  size  INTEGER NOT NULL,
  lines INTEGER NOT NULL
);

-- The chain head: the seal of the last sealed entry, and the last write's time (kept monotonic).
CREATE TABLE IF NOT EXISTS memory_chain (
  id       INTEGER PRIMARY KEY CHECK (id = 1),
  head     TEXT    NOT NULL DEFAULT '',
  last_tx  INTEGER NOT NULL DEFAULT 0,
  last_file TEXT   NOT NULL DEFAULT ''
);
INSERT OR IGNORE INTO memory_chain (id, head, last_tx, last_file) VALUES (1, '', 0, '');

-- Deprecated SSE transport: sessions and undelivered messages, valid on every worker.
CREATE TABLE IF NOT EXISTS memory_sse_sessions (
  id         TEXT PRIMARY KEY,
  created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_sse_outbox (
  id      INTEGER PRIMARY KEY AUTOINCREMENT,
  session TEXT NOT NULL,
  payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_sse_outbox_session ON memory_sse_outbox(session, id);
