-- Drops the delivery options with the values in them: events not yet relayed are then delivered at once,
-- with asynq's defaults.
DROP INDEX IF EXISTS outbox_events_process_at_idx;

--bun:split

ALTER TABLE outbox_events
    DROP COLUMN IF EXISTS process_at,
    DROP COLUMN IF EXISTS max_retry,
    DROP COLUMN IF EXISTS timeout_ns,
    DROP COLUMN IF EXISTS deadline,
    DROP COLUMN IF EXISTS task_group,
    DROP COLUMN IF EXISTS retention_ns;
