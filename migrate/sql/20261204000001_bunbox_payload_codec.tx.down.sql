-- Refuses while unpublished rows hold an encoded payload: dropping the column would lose their payloads.
-- (The check runs only while the column exists, so that the migration runs again over itself.)
DO $$
DECLARE
    encoded boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass('outbox_events') AND attname = 'payload_encoded' AND NOT attisdropped) THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM outbox_events WHERE payload_encoded IS NOT NULL AND published_at IS NULL)'
            INTO encoded;
        IF encoded THEN
            RAISE EXCEPTION 'bunbox: outbox_events holds unpublished rows with an encoded payload (payload_encoded); publish or delete them before rolling back the payload codec migration';
        END IF;
    END IF;
END
$$;

--bun:split

ALTER TABLE outbox_events DROP COLUMN IF EXISTS payload_encoded;
