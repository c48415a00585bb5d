-- Refuses while encoded rows are pending: dropping the column would lose their payloads.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox_events WHERE payload_encoded IS NOT NULL AND published_at IS NULL) THEN
        RAISE EXCEPTION 'bunbox: outbox_events holds unpublished rows with an encoded payload (payload_encoded); publish or delete them before rolling back the payload codec migration';
    END IF;
END
$$;

--bun:split

ALTER TABLE outbox_events DROP COLUMN IF EXISTS payload_encoded;
