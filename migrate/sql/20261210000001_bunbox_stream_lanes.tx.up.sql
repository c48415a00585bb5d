-- Lanes of the snapshot cursor: several cursors per outbox, so that relays (and a relay's workers) share
-- the stream, and a backlog in one queue does not delay another (Config.Queues). A lane is a queue and a
-- slice of it: every new row gets a slice number at random (stream_slice, 0 to 3), and a row with none
-- (written before this migration, or with stream_slice NULL) is in slice 0. Each lane has its own cursor
-- row in bunbox_stream (queue, slice set; the row named 'outbox', the base, has them NULL), which a
-- stream round locks with FOR UPDATE SKIP LOCKED: one round per lane at a time, rounds of other lanes
-- beside it. A relay creates a lane's cursor row as a copy of the base when it finds streamed rows in a
-- lane that has none; until then the base judges the lane's rows (internal/streamsql).
--
-- The column is added nullable with no default (no row is rewritten), then given its default; the new
-- index serves a lane's read, so that a lane never walks another queue's rows. The index on (xid, id)
-- stays: cleanup, the reconciler's windows, bunbox status and the cluster check read the streamed rows in
-- xid order across lanes.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS stream_slice smallint;

--bun:split

ALTER TABLE outbox_events ALTER COLUMN stream_slice SET DEFAULT floor(random() * 4)::smallint;

--bun:split

ALTER TABLE bunbox_stream ADD COLUMN IF NOT EXISTS queue text;

--bun:split

ALTER TABLE bunbox_stream ADD COLUMN IF NOT EXISTS slice smallint;

--bun:split

CREATE INDEX IF NOT EXISTS outbox_events_stream_lane_idx ON outbox_events (queue, (coalesce(stream_slice, 0)), xid, id)
    WHERE published_at = 'infinity';

--bun:split

COMMENT ON TABLE outbox_events IS 'bunbox schema 20261210000001';
