DROP INDEX IF EXISTS outbox_events_keyed_inflight_idx;

--bun:split

DROP INDEX IF EXISTS outbox_events_keyed_open_idx;

--bun:split

DROP INDEX IF EXISTS outbox_events_unkeyed_pending_idx;

--bun:split

ALTER TABLE outbox_events DROP COLUMN IF EXISTS completed_at;

--bun:split

ALTER TABLE outbox_events DROP COLUMN IF EXISTS ordering_key;
