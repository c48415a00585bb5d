-- What the snapshot cursor needs to tell that the database now runs on another cluster (a restore with
-- pg_dump/pg_restore, logical replication, pg_upgrade) or another transaction id space. The cursor's
-- snapshots and the rows' xid are in the transaction id space of the cluster that wrote them; on another
-- cluster new transactions may get ids the old cursor counts as delivered. A stream round compares
-- system_id with the cluster's (pg_control_system()) and the cluster's next transaction id with the
-- cursor's, and on a change hands every streamed row the old cursor did not deliver to the per-row path,
-- then starts the cursor anew (relay: stream_cluster.go). max_id bounds the ids of the rows the cursor
-- has read: a row written after a restore has an id above it (the identity sequence is restored too), so
-- the old cursor's word on it is never taken.
-- (From migration 20261211000001 on, the positions live in bunbox_stream_positions: run again over such
-- a schema, this one leaves bunbox_stream as it is.)
DO $$
BEGIN
    IF to_regclass('bunbox_stream_positions') IS NULL THEN
        ALTER TABLE bunbox_stream ADD COLUMN IF NOT EXISTS system_id bigint;
        ALTER TABLE bunbox_stream ADD COLUMN IF NOT EXISTS max_id bigint;
        UPDATE bunbox_stream SET system_id = (SELECT system_identifier FROM pg_control_system()),
          max_id = (SELECT max(id) FROM outbox_events)
        WHERE system_id IS NULL;
    END IF;
END
$$;
