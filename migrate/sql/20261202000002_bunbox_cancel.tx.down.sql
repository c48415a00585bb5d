DROP INDEX IF EXISTS outbox_events_cancelled_idx;

--bun:split

DROP INDEX IF EXISTS outbox_events_cancelling_idx;

--bun:split

DROP INDEX IF EXISTS outbox_events_queue_claim_idx;

--bun:split

DROP INDEX IF EXISTS outbox_events_unkeyed_pending_idx;

--bun:split

CREATE INDEX IF NOT EXISTS outbox_events_unkeyed_pending_idx ON outbox_events (id)
    WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL;

--bun:split

-- Drops the cancellations with the columns: a cancelled event not yet published is then delivered.
ALTER TABLE outbox_events
    DROP COLUMN IF EXISTS cancel_result,
    DROP COLUMN IF EXISTS cancel_settled_at,
    DROP COLUMN IF EXISTS cancelled_at;
