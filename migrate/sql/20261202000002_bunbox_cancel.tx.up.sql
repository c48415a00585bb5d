-- Cancel in a transaction (bunx.Outbox.Cancel) and fair queues (relay.Config.Queues).
--
-- cancelled_at: the transaction that cancelled the event committed, and the relay never claims the row again.
-- cancel_settled_at: nothing is left to take back: the event was never published, or the relay took its
-- tasks back out of asynq (or found they had run, or were gone). cancel_result says which.
ALTER TABLE outbox_events
    ADD COLUMN IF NOT EXISTS cancelled_at      timestamptz,
    ADD COLUMN IF NOT EXISTS cancel_settled_at timestamptz,
    ADD COLUMN IF NOT EXISTS cancel_result     text;

--bun:split

-- The unkeyed claim walks this one. It is built again to leave out the cancelled rows, which every claim
-- would otherwise step over. (Building an index scans the table while it holds off writes: on a large
-- table, apply this migration when writes are quiet.)
DROP INDEX IF EXISTS outbox_events_unkeyed_pending_idx;

--bun:split

CREATE INDEX IF NOT EXISTS outbox_events_unkeyed_pending_idx ON outbox_events (id)
    WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL;

--bun:split

-- The claim of one queue (relay.Config.Queues): its pending rows in id order, however large the backlog
-- of the other queues.
CREATE INDEX IF NOT EXISTS outbox_events_queue_claim_idx ON outbox_events (queue, id)
    WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL;

--bun:split

-- The cancelled rows whose tasks the relay has still to take back out of asynq: empty almost always, so
-- the relay's look for them costs one index descent.
CREATE INDEX IF NOT EXISTS outbox_events_cancelling_idx ON outbox_events (id)
    WHERE cancelled_at IS NOT NULL AND cancel_settled_at IS NULL;

--bun:split

-- The relay deletes cancelled rows PublishedRetention after they were cancelled, oldest first.
CREATE INDEX IF NOT EXISTS outbox_events_cancelled_idx ON outbox_events (cancelled_at)
    WHERE cancelled_at IS NOT NULL;
