CREATE INDEX IF NOT EXISTS outbox_events_published_idx ON outbox_events (published_at)
    WHERE published_at IS NOT NULL;

--bun:split

DROP INDEX IF EXISTS outbox_events_published_at_idx;
