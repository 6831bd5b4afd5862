-- kiln index, schema version 5: more names for one source.
--
-- kiln.torch finds a block's source by the name `kiln-fp-<fingerprint>.pt2`. Two
-- fingerprints can export one program (one model hash, so one source): the second
-- registration stores nothing and, before version 5, left its name nowhere, so every
-- process with that fingerprint exported the block again. Its name is kept here
-- (schema/sources.md, "Names"); LIST_SOURCES lists it as one of the source's `aliases`.
CREATE TABLE source_names (
  model_hash  TEXT NOT NULL,
  name        TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (model_hash, name)
) WITHOUT ROWID;
