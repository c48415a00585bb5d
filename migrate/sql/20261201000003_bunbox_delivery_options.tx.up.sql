-- Delivery options kept in the row (model.WithProcessAt, WithMaxRetry, ...), mapped by the relay onto
-- asynq's options. Every column is nullable, NULL meaning asynq's default, so adding them rewrites no row.
-- The checks are NOT VALID: PostgreSQL checks every new row without scanning the rows already there
-- (which are all NULL).
ALTER TABLE outbox_events
    ADD COLUMN IF NOT EXISTS process_at   timestamptz,
    ADD COLUMN IF NOT EXISTS max_retry    integer,
    ADD COLUMN IF NOT EXISTS timeout_ns   bigint,
    ADD COLUMN IF NOT EXISTS deadline     timestamptz,
    ADD COLUMN IF NOT EXISTS task_group   text,
    ADD COLUMN IF NOT EXISTS retention_ns bigint;

--bun:split

-- Guarded, so that the migration can run again over a schema that has them (PostgreSQL has no
-- ADD CONSTRAINT IF NOT EXISTS): `bunbox schema` applied twice, or after a switch of migration tool.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_max_retry_check') THEN
        ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_max_retry_check CHECK (max_retry >= 0) NOT VALID;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_timeout_ns_check') THEN
        ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_timeout_ns_check CHECK (timeout_ns >= 1000000000) NOT VALID;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_retention_ns_check') THEN
        ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_retention_ns_check CHECK (retention_ns >= 1000000000) NOT VALID;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_task_group_check') THEN
        ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_task_group_check CHECK (btrim(task_group) <> '') NOT VALID;
    END IF;
END
$$;

--bun:split

-- `bunbox status` counts the scheduled events (process_at still ahead) over this index only.
CREATE INDEX IF NOT EXISTS outbox_events_process_at_idx ON outbox_events (process_at)
    WHERE process_at IS NOT NULL;
