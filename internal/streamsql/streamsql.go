// Package streamsql holds the SQL that tells the state of a row written while the snapshot cursor is on
// (relay.EnableStream), for every package that reads the outbox: the relay, its reconciler and cleanup,
// bunbox status, the admin and UI views, the metrics.
//
// A streamed row has published_at = 'infinity' and the id of the transaction that wrote it in xid. No
// relay updates it when it is delivered: the relay reads what committed between two snapshots and moves
// the one row of bunbox_stream past it. So a streamed row is delivered when that cursor is past it, and
// waiting otherwise. A row the stream hands to the per-row path (its enqueue failed, or it has an
// ordering key) leaves the stream: its published_at is NULL again, and it is pending, published or dead
// as every row was before the stream.
//
// The SQL is written with the default table names; tables.Names.SQL rewrites it for a schema and a
// table prefix, as the rest of bunbox's SQL.
package streamsql

// Sentinel is the published_at of a row in the stream, as SQL.
const Sentinel = `'infinity'::timestamptz`

// Cursor is the join that names the cursor's row s (its columns snap_from, snap_to, after_xid,
// after_id, moved_at; all NULL when the stream was never turned on), for Delivered and Waiting:
//
//	SELECT count(*) FROM outbox_events e <Cursor> WHERE <Waiting>
const Cursor = `LEFT JOIN bunbox_stream s ON s.name = 'outbox'`

// Delivered is true for a row of outbox_events aliased e that is in the stream and that the cursor
// (aliased s, see Cursor) has passed: its transaction committed before the last finished snapshot
// (snap_from), or between it and the one being delivered (snap_to) at or before the position reached in
// it (after_xid, after_id).
const Delivered = `(e.published_at = 'infinity' AND coalesce(pg_visible_in_snapshot(e.xid, s.snap_from)
  OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to) AND (e.xid, e.id) <= (s.after_xid, s.after_id)), false))`

// Waiting is true for a row of outbox_events aliased e that is in the stream and not yet delivered (see
// Delivered): what the stream still has to enqueue. Its first condition is implied by the rest (a row
// whose transaction is older than snap_from's xmin is visible in snap_from, or was rolled back) and
// bounds the read to outbox_events_stream_idx's newest entries: a count of the waiting rows reads them,
// not every streamed row the retention keeps.
const Waiting = `(e.published_at = 'infinity' AND e.xid >= pg_snapshot_xmin(s.snap_from) AND NOT coalesce(pg_visible_in_snapshot(e.xid, s.snap_from)
  OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to) AND (e.xid, e.id) <= (s.after_xid, s.after_id)), false))`

// Enabled is a query for one boolean: whether the stream is on for the outbox, that is whether
// published_at has the stream's default (relay.EnableStream sets it, relay.DisableStream drops it). It
// reads only the catalog, so any role may ask it.
const Enabled = `SELECT EXISTS (SELECT 1 FROM pg_attrdef d
  JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
  WHERE d.adrelid = to_regclass('outbox_events') AND a.attname = 'published_at')`
