-- Time marks for the reconciler's read of the stream (relay.EnableStream). A streamed row the cursor has
-- delivered has no publish time, so the reconciler places it in its window by its created_at and reads
-- the stream's index, ordered by xid, from where the window's rows begin. A mark pairs a time with the
-- xmax of a snapshot taken at or before it: every transaction that began after at has an xid of at
-- least next_xid, so a row created after at is at or past next_xid in that index. Reconcilers write one
-- mark about every 30 seconds and delete those older than their TaskRetention; a reconciler younger than
-- its window starts its read at the latest mark before the window instead of looking for the window's
-- first row among every streamed row the table keeps.
CREATE TABLE IF NOT EXISTS bunbox_stream_marks (
    at       timestamptz PRIMARY KEY,
    next_xid xid8        NOT NULL
);
