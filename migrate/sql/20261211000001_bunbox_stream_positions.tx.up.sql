-- The cursors' positions leave their rows (bunbox_stream keeps each cursor's name, queue and slice, and
-- the lock a stream round takes on it): every move of a cursor inserts a new position into
-- bunbox_stream_positions, numbered seq within its cursor; no position is updated or deleted. A cursor's
-- position is the one with its greatest seq, found at the top of the primary key. The table has two
-- partitions (part 0 and 1), which the relays rotate as PgQ rotates its event tables: once a partition
-- holds enough positions, a relay copies every cursor's position into the other one and truncates it
-- (store.Stream.Rotate), so the table keeps a bounded number of rows and no dead tuples.
--
-- Moved in place, a cursor row kept a version per move that a transaction holding the xmin horizon made
-- unremovable, and every read of it walked them all: after 3,000 moves under such a transaction a look-up
-- by name read 250 buffers instead of 2, and a relay reads its lanes' cursors at every round. A position
-- found from the top of its cursor's index entries reads the newest one first, and TRUNCATE frees a
-- partition whatever the horizon. A round computes the next seq from the one it read after taking the
-- lock, so two moves from one read cannot both land (the primary key refuses the second).
CREATE TABLE IF NOT EXISTS bunbox_stream_positions (
    part      smallint    NOT NULL,
    name      text        NOT NULL,
    seq       bigint      NOT NULL,
    snap_from pg_snapshot NOT NULL,
    snap_to   pg_snapshot,
    after_xid xid8,
    after_id  bigint,
    system_id bigint,
    max_id    bigint,
    moved_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, seq, part)
) PARTITION BY LIST (part);

--bun:split

CREATE TABLE IF NOT EXISTS bunbox_stream_positions_0 PARTITION OF bunbox_stream_positions FOR VALUES IN (0);

--bun:split

CREATE TABLE IF NOT EXISTS bunbox_stream_positions_1 PARTITION OF bunbox_stream_positions FOR VALUES IN (1);

--bun:split

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('bunbox_stream') AND attname = 'snap_from'
        AND NOT attisdropped) THEN
        INSERT INTO bunbox_stream_positions (part, name, seq, snap_from, snap_to, after_xid, after_id, system_id,
          max_id, moved_at)
        SELECT 0, name, 1, snap_from, snap_to, after_xid, after_id, system_id, max_id, moved_at FROM bunbox_stream
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;

--bun:split

ALTER TABLE bunbox_stream DROP COLUMN IF EXISTS snap_from, DROP COLUMN IF EXISTS snap_to,
  DROP COLUMN IF EXISTS after_xid, DROP COLUMN IF EXISTS after_id, DROP COLUMN IF EXISTS system_id,
  DROP COLUMN IF EXISTS max_id, DROP COLUMN IF EXISTS moved_at;

--bun:split

COMMENT ON TABLE outbox_events IS 'bunbox schema 20261211000001';
