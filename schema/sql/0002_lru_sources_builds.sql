-- kiln index, schema version 2: exact LRU order, sources, and build records.

-- Seconds are too coarse to order accesses: access_seq increases by one on every put and
-- hit, and eviction takes the smallest first. Existing rows keep their order by time.
ALTER TABLE artifacts ADD COLUMN access_seq INTEGER NOT NULL DEFAULT 0;
UPDATE artifacts SET access_seq = (SELECT COUNT(*) FROM artifacts AS a2
  WHERE a2.last_access < artifacts.last_access
     OR (a2.last_access = artifacts.last_access AND a2.key_digest <= artifacts.key_digest));
DROP INDEX artifacts_by_access;
CREATE INDEX artifacts_by_lru ON artifacts(pinned, access_seq);

-- Sources (torch.export archives) by model hash, stored as blobs like artifacts and
-- never evicted.
CREATE TABLE sources (
  model_hash  TEXT PRIMARY KEY,
  blob_digest TEXT NOT NULL REFERENCES blobs(digest),
  size        INTEGER NOT NULL,
  created_at  INTEGER NOT NULL,
  name        TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX sources_by_blob ON sources(blob_digest);

-- The newest build outcome per key, with the worker's log.
CREATE TABLE builds (
  key_digest  TEXT PRIMARY KEY,
  started_at  INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  ok          INTEGER NOT NULL,
  error       TEXT NOT NULL,
  log         TEXT NOT NULL
) WITHOUT ROWID;
