-- kiln index, schema version 1: blobs, the artifacts that point at them, and counters.
-- Applied in one transaction; PRAGMA user_version is set to 1 afterwards by the store.

-- One row per blob file (schema/blob-format.md). A blob is shared by every artifact (and
-- source) with the same content, and deleted when nothing references it.
CREATE TABLE blobs (
  digest      TEXT PRIMARY KEY,     -- 64 hex: SHA-256 of the uncompressed bytes
  size        INTEGER NOT NULL,     -- uncompressed bytes
  stored_size INTEGER NOT NULL,     -- bytes of the blob file, header included
  created_at  INTEGER NOT NULL      -- unix seconds
) WITHOUT ROWID;

-- One row per artifact: every key field as a column (schema/key.md), so that listing and
-- eviction can filter on any of them, and the key's JSON form to rebuild it exactly.
CREATE TABLE artifacts (
  key_digest             TEXT PRIMARY KEY,   -- 64 hex: SHA-256 of the canonical key encoding
  kind                   TEXT NOT NULL,
  model_hash             TEXT NOT NULL,
  region                 TEXT NOT NULL,
  gpu_arch               TEXT NOT NULL,
  gpu_name               TEXT NOT NULL,
  torch_version          TEXT NOT NULL,
  torch_git              TEXT NOT NULL,
  cuda_version           TEXT NOT NULL,
  triton_version         TEXT NOT NULL,
  platform               TEXT NOT NULL,
  machine                TEXT NOT NULL,
  cpu_isa                TEXT NOT NULL,
  dtype                  TEXT NOT NULL,
  inputs                 TEXT NOT NULL,      -- canonical JSON
  compile_options        TEXT NOT NULL,      -- canonical JSON
  compile_options_digest TEXT NOT NULL,      -- 64 hex
  format_version         INTEGER NOT NULL,
  key_json               TEXT NOT NULL,
  blob_digest            TEXT NOT NULL REFERENCES blobs(digest),
  size                   INTEGER NOT NULL,   -- uncompressed bytes
  created_at             INTEGER NOT NULL,   -- unix seconds
  last_access            INTEGER NOT NULL,   -- unix seconds
  hits                   INTEGER NOT NULL DEFAULT 0,
  build_seconds          REAL NOT NULL DEFAULT 0,
  pinned                 INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX artifacts_by_blob ON artifacts(blob_digest);
CREATE INDEX artifacts_by_model ON artifacts(model_hash);
CREATE INDEX artifacts_by_access ON artifacts(pinned, last_access);

-- Store-wide counters that outlive the entries they counted.
CREATE TABLE counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters(name, value) VALUES ('hits', 0), ('misses', 0), ('evictions', 0), ('quarantined', 0);
