-- The snapshot cursor (relay.EnableStream). While the stream is on, the columns' defaults make every new
-- row carry the id of the transaction that wrote it (xid, pg_current_xact_id()) and published_at =
-- 'infinity': the row is in the stream. No relay updates it when it is delivered: the relay reads the
-- rows whose transactions committed between two snapshots (PgQ's batches) and moves one cursor row,
-- bunbox_stream, past them. A streamed row is delivered when the cursor is past it (see the relay's
-- streamDeliveredSQL); a row the stream cannot deliver (its enqueue failed, or it has an ordering key) is
-- handed to the per-row path: published_at NULL, as every row was before.
--
-- This migration changes no default: the stream is off until relay.EnableStream turns it on. The column
-- is nullable with no default, so adding it rewrites no row; the index holds only streamed rows.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS xid xid8;


CREATE TABLE IF NOT EXISTS bunbox_stream (
    name       text        PRIMARY KEY,
    snap_from  pg_snapshot NOT NULL,
    snap_to    pg_snapshot,
    after_xid  xid8,
    after_id   bigint,
    moved_at   timestamptz NOT NULL DEFAULT now()
);


CREATE INDEX IF NOT EXISTS outbox_events_stream_idx ON outbox_events (xid, id)
    WHERE published_at = 'infinity';
