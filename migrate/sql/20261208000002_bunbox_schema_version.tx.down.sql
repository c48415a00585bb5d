COMMENT ON TABLE outbox_events IS NULL;
