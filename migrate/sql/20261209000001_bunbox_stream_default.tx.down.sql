-- Turns the stream off, as relay.DisableStream does: new rows are pending rows of the per-row path again,
-- and so are the streamed rows the cursor has not passed (a waiting row cancelled meanwhile was never
-- enqueued: its cancel is settled). The rows the cursor passed stay delivered; the cursor row is kept.
ALTER TABLE outbox_events
  ALTER COLUMN xid DROP DEFAULT,
  ALTER COLUMN published_at DROP DEFAULT;

--bun:split

UPDATE outbox_events e SET published_at = NULL,
  cancel_settled_at = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL THEN now() ELSE e.cancel_settled_at END,
  cancel_result = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL THEN 'never published' ELSE e.cancel_result END,
  completed_at = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL AND e.ordering_key IS NOT NULL
    THEN coalesce(e.completed_at, now()) ELSE e.completed_at END
FROM bunbox_stream s
WHERE s.name = 'outbox' AND e.published_at = 'infinity'
  AND NOT coalesce(pg_visible_in_snapshot(e.xid, s.snap_from)
    OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to) AND (e.xid, e.id) <= (s.after_xid, s.after_id)), false);

--bun:split

COMMENT ON TABLE outbox_events IS 'bunbox schema 20261208000002';
