CREATE TABLE IF NOT EXISTS outbox_events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL,
    event_name      text        NOT NULL,
    queue           text        NOT NULL DEFAULT 'default',
    payload         jsonb       NOT NULL,
    metadata        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error      text,
    dead_at         timestamptz,
    CONSTRAINT outbox_events_event_id_key UNIQUE (event_id)
);

--bun:split

-- The relay's claim scans this index only: it holds the pending rows, however large the table grows.
CREATE INDEX IF NOT EXISTS outbox_events_pending_idx ON outbox_events (id)
    WHERE published_at IS NULL AND dead_at IS NULL;

--bun:split

-- Retention cleanup deletes published rows oldest first.
CREATE INDEX IF NOT EXISTS outbox_events_published_idx ON outbox_events (published_at)
    WHERE published_at IS NOT NULL;

--bun:split

CREATE INDEX IF NOT EXISTS outbox_events_dead_idx ON outbox_events (dead_at)
    WHERE dead_at IS NOT NULL;
