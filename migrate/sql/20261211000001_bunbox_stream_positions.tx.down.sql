-- The positions go back into the cursor rows: each cursor row takes its newest position.
ALTER TABLE bunbox_stream ADD COLUMN IF NOT EXISTS snap_from pg_snapshot, ADD COLUMN IF NOT EXISTS snap_to pg_snapshot,
  ADD COLUMN IF NOT EXISTS after_xid xid8, ADD COLUMN IF NOT EXISTS after_id bigint,
  ADD COLUMN IF NOT EXISTS system_id bigint, ADD COLUMN IF NOT EXISTS max_id bigint,
  ADD COLUMN IF NOT EXISTS moved_at timestamptz NOT NULL DEFAULT now();

--bun:split

DO $$
BEGIN
    IF to_regclass('bunbox_stream_positions') IS NOT NULL THEN
        UPDATE bunbox_stream c SET snap_from = p.snap_from, snap_to = p.snap_to, after_xid = p.after_xid,
          after_id = p.after_id, system_id = p.system_id, max_id = p.max_id, moved_at = p.moved_at
        FROM (SELECT DISTINCT ON (name) * FROM bunbox_stream_positions ORDER BY name, seq DESC) p
        WHERE p.name = c.name;
        DELETE FROM bunbox_stream WHERE snap_from IS NULL;
    END IF;
END
$$;

--bun:split

ALTER TABLE bunbox_stream ALTER COLUMN snap_from SET NOT NULL;

--bun:split

DROP TABLE IF EXISTS bunbox_stream_positions;

--bun:split

COMMENT ON TABLE outbox_events IS 'bunbox schema 20261210000001';
