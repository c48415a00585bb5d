-- Per-key ordering (model.WithOrderingKey). A keyed row goes pending -> published (its task is in asynq)
-- -> completed (the relay saw the task completed), or dead. The next row of its key is claimed only when
-- no row of the key with a smaller id is still unfinished (completed_at IS NULL).
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS ordering_key text;

--bun:split

ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS completed_at timestamptz;

--bun:split

-- The unkeyed claim walks this one, so that pending keyed rows held back behind their key are never in
-- its way.
CREATE INDEX IF NOT EXISTS outbox_events_unkeyed_pending_idx ON outbox_events (id)
    WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL;

--bun:split

-- The unfinished rows of each key: the first one is the key's head, the only one that may be in asynq.
-- The keyed claim walks it key by key (a skip scan) to find the heads.
CREATE INDEX IF NOT EXISTS outbox_events_keyed_open_idx ON outbox_events (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND completed_at IS NULL;

--bun:split

-- The keyed rows whose task is in asynq and not yet seen completed: what the relay's tracker looks up.
CREATE INDEX IF NOT EXISTS outbox_events_keyed_inflight_idx ON outbox_events (id)
    WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND published_at IS NOT NULL AND dead_at IS NULL;
