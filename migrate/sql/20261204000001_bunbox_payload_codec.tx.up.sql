-- Payload codecs (bunx.WithCodec): a payload that an Outbox's codec compressed or encrypted is kept as bytes
-- in payload_encoded, and the payload column holds JSON null. How it was encoded travels in the metadata
-- (model.HeaderPayloadEncoding, and model.HeaderPayloadKeyID for the key that encrypted it), which the relay
-- copies into the task's headers. The column is NULL for every other row: the JSON payload stays where it
-- was, queryable as before, and adding a nullable column with no default rewrites no row.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS payload_encoded bytea;
