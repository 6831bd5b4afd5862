-- kiln index, schema version 3: key format 2 (schema/key.md) adds the call's structure.

-- Artifacts of key format 1 are unreachable: no format-2 key has their digest, and some
-- of their key texts no longer parse (compile options are checked now). They are a cache:
-- dropped here, and the blobs nothing references any more are collected when the store
-- opens (recovery removes unreferenced blobs).
DELETE FROM artifacts WHERE format_version < 2;
ALTER TABLE artifacts ADD COLUMN call TEXT NOT NULL DEFAULT '';
