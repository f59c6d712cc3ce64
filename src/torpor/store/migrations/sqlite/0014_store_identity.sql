-- torpor schema v14: the store's identity (issue 33, G16). One row, created once with the
-- schema (or by this migration on an older store): `store_id` is 32 random hex digits. Workers
-- pin it outside the database, in this host's high-water mark beside the keyring
-- (torpor.marks), and signed approval decisions name it (torpor.signing, version 2), so a
-- decision copied from another store, or a store recreated where another stood, is refused.
-- A store migrated from before keeps its decisions signed then valid only for itself: they
-- named no store, and are re-requested (see CHANGELOG).
CREATE TABLE store_identity (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    store_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
INSERT INTO store_identity (one, store_id, created_at_ms)
VALUES (1, lower(hex(randomblob(16))), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
