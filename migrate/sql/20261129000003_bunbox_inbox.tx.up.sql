-- The consumer side: bunx.Inbox records here, in the handler's own transaction, each event a handler has
-- processed, so that a repeated asynq delivery is acknowledged without running the work again.
CREATE TABLE IF NOT EXISTS inbox_events (
    event_id   uuid        NOT NULL,
    handler    text        NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, handler)
);

--bun:split

CREATE INDEX IF NOT EXISTS inbox_events_handled_at_idx ON inbox_events (handled_at);
