-- The index of publish times, built again without the streamed rows. While the stream is on
-- (relay.EnableStream) every new row is written with published_at = 'infinity', and the old index,
-- WHERE published_at IS NOT NULL, took one more entry per row, all of them under that one key: an index
-- write per event and space that only grew. Nothing reads those entries. The queries that read this index
-- (retention cleanup, the reconciler's pages) bound published_at by a time, which PostgreSQL proves to
-- leave 'infinity' out, so they read the new index as they read the old one, a relay of the previous
-- release included.
--
-- The new index is built before the old one is dropped, so reads go on while it is built; writes wait
-- for the build (it scans the table): on a large table, apply this migration when writes are quiet.
CREATE INDEX IF NOT EXISTS outbox_events_published_at_idx ON outbox_events (published_at)
    WHERE published_at IS NOT NULL AND published_at <> 'infinity';

--bun:split

DROP INDEX IF EXISTS outbox_events_published_idx;
