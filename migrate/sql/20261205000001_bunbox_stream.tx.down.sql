-- Turns the stream off (as relay.DisableStream does) and drops it: every streamed row the cursor has
-- passed gets the time the cursor last moved as its published_at, every other streamed row becomes
-- pending again (published_at NULL), to be claimed by the per-row path.
ALTER TABLE outbox_events ALTER COLUMN published_at DROP DEFAULT;

--bun:split

DO $$
BEGIN
    IF to_regclass('bunbox_stream') IS NOT NULL THEN
        UPDATE outbox_events e
        SET published_at = CASE
            WHEN pg_visible_in_snapshot(e.xid, s.snap_from)
              OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to)
                  AND (e.xid, e.id) <= (s.after_xid, s.after_id))
            THEN s.moved_at END
        FROM (SELECT * FROM bunbox_stream WHERE name = 'outbox') s
        WHERE e.published_at = 'infinity';
        UPDATE outbox_events SET published_at = NULL WHERE published_at = 'infinity';
    END IF;
END
$$;

--bun:split

DROP INDEX IF EXISTS outbox_events_stream_idx;

--bun:split

DROP TABLE IF EXISTS bunbox_stream;

--bun:split

ALTER TABLE outbox_events DROP COLUMN IF EXISTS xid;
