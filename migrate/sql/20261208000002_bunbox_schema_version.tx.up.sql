-- The schema's version, in the outbox table's comment: a relay refuses, naming both versions, to run
-- against a schema newer than it knows or older than it needs (internal/schemaversion). Every bunbox
-- migration from this one on ends by writing its own number here.
COMMENT ON TABLE outbox_events IS 'bunbox schema 20261208000002';
