-- The snapshot stream is the relay: every new row is streamed from this migration on. The columns'
-- defaults make each new row carry the id of the transaction that wrote it (xid) and published_at =
-- 'infinity' (the row waits in the stream); relays deliver such rows by moving the cursor row of
-- bunbox_stream past them, with no UPDATE per row. The per-row path stays as the exception queue: rows
-- whose enqueue failed (retries, dead rows, an operator's retry), rows with an ordering key, and the rows
-- written before this migration, which stay pending rows of the per-row path and are delivered by it.
--
-- It does what relay.EnableStream does: the ALTER takes the table's lock, so every writer's row is written
-- by a transaction that starts or resumes after it, and none is visible in the cursor's first snapshot,
-- taken after it. A cursor row left by an earlier EnableStream is kept as it is.
ALTER TABLE outbox_events
  ALTER COLUMN xid SET DEFAULT pg_current_xact_id(),
  ALTER COLUMN published_at SET DEFAULT 'infinity'::timestamptz;

--bun:split

-- (Run again over a schema of migration 20261211000001 or later, where the cursor row exists and its
-- position lives in bunbox_stream_positions, it writes nothing.)
DO $$
BEGIN
    IF to_regclass('bunbox_stream_positions') IS NULL THEN
        INSERT INTO bunbox_stream (name, snap_from, system_id, max_id)
        VALUES ('outbox', pg_current_snapshot(), (SELECT system_identifier FROM pg_control_system()),
          (SELECT max(id) FROM outbox_events))
        ON CONFLICT (name) DO NOTHING;
    END IF;
END
$$;

--bun:split

COMMENT ON TABLE outbox_events IS 'bunbox schema 20261209000001';
