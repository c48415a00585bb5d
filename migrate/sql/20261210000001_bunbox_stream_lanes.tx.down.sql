-- Back to one cursor: the base row ('outbox') judges every streamed row again. A row a lane delivered
-- that the base would take for waiting leaves the stream as published at its lane's last move; a row
-- waiting in its lane goes to the per-row path (published_at NULL), delivered once there. Then the lane
-- rows, the index and the column go.
DO $$
BEGIN
    IF to_regclass('bunbox_stream') IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('outbox_events') AND attname = 'stream_slice' AND NOT attisdropped) THEN
        UPDATE outbox_events e
        SET published_at = CASE WHEN l.delivered THEN l.moved_at END
        FROM (SELECT e2.id, s.moved_at,
                pg_visible_in_snapshot(e2.xid, s.snap_from)
                  OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e2.xid, s.snap_to)
                      AND (e2.xid, e2.id) <= (s.after_xid, s.after_id)) AS delivered,
                coalesce(pg_visible_in_snapshot(e2.xid, b.snap_from)
                  OR (b.snap_to IS NOT NULL AND pg_visible_in_snapshot(e2.xid, b.snap_to)
                      AND (e2.xid, e2.id) <= (b.after_xid, b.after_id)), false) AS base
              FROM outbox_events e2
              JOIN bunbox_stream s ON s.name = 'outbox/' || e2.queue || '/' || coalesce(e2.stream_slice, 0)
              LEFT JOIN bunbox_stream b ON b.name = 'outbox'
              WHERE e2.published_at = 'infinity') l
        WHERE e.id = l.id AND e.published_at = 'infinity' AND (NOT l.delivered OR NOT l.base);
    END IF;
    IF to_regclass('bunbox_stream') IS NOT NULL THEN
        DELETE FROM bunbox_stream WHERE name <> 'outbox';
    END IF;
END
$$;

--bun:split

DROP INDEX IF EXISTS outbox_events_stream_lane_idx;

--bun:split

ALTER TABLE bunbox_stream DROP COLUMN IF EXISTS slice;

--bun:split

ALTER TABLE bunbox_stream DROP COLUMN IF EXISTS queue;

--bun:split

ALTER TABLE outbox_events DROP COLUMN IF EXISTS stream_slice;

--bun:split

COMMENT ON TABLE outbox_events IS 'bunbox schema 20261209000001';
