-- kiln index, schema version 4: the fleet tier (schema/signature.md, schema/oci-layout.md).

-- Where an artifact came from: 'build' (built on this node), 'put' (a client's PUT),
-- 'registry' (pulled from the fleet's registry, signature verified), 'import' (kilnctl
-- import). Rows from before version 4 say ''.
ALTER TABLE artifacts ADD COLUMN origin TEXT NOT NULL DEFAULT '';

-- The signature kept with an entry: made here (a build pushed to the registry) or
-- verified here (a pull). subject: 'artifact:<key digest>' or 'source:<model hash>'.
CREATE TABLE signatures (
  subject         TEXT PRIMARY KEY,
  manifest_digest TEXT NOT NULL,   -- sha256:<hex> of the OCI manifest it signs
  signer          TEXT NOT NULL,   -- the key's name
  signature       TEXT NOT NULL,   -- base64 of the 64-byte ed25519 signature
  payload         TEXT NOT NULL,   -- the signed bytes (schema/signature.md)
  created_at      INTEGER NOT NULL
) WITHOUT ROWID;

-- Pushes to the registry not yet done, one per subject: durable, so that a kilnd killed
-- or a registry down loses none. A build's row is written in the same transaction as the
-- artifact (StoreOptions::push_outbox).
CREATE TABLE push_queue (
  subject         TEXT PRIMARY KEY,
  enqueued_at     INTEGER NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  last_error      TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX push_queue_by_due ON push_queue(next_attempt_at);
