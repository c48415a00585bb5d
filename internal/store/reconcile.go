package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// The reconciler's statements: it reads the published (and the delivered streamed) rows, and puts back in
// line those whose task Redis lost.

// ReconcileRow is the part of a published row a reconciler pass needs.
type ReconcileRow struct {
	ID          int64      `bun:"id"`
	EventID     uuid.UUID  `bun:"event_id"`
	Name        string     `bun:"event_name"`
	Queue       string     `bun:"queue"`
	PublishedAt time.Time  `bun:"published_at"`
	ProcessAt   *time.Time `bun:"process_at"`
	PageKey     time.Time  `bun:"page_key"` // the column the page is ordered by: published_at or process_at
	// Streamed marks a streamed row the cursor has delivered: PublishedAt holds its created_at (it has no
	// publish time), and PageXID its xid, by which its pages are ordered.
	Streamed bool   `bun:"streamed"`
	PageXID  string `bun:"page_xid"`
}

// reconcileHorizonSQL reads the database's clock and the horizon: the clock, or the start of the earliest
// client transaction open in this database when that is earlier (a relay's round stamps its rows with
// it, and they become visible at its commit). Background workers (autovacuum) cannot publish rows.
//
// It also reads the transactions whose start the reconciler's role cannot see: pg_stat_activity shows
// the sessions of other roles with a NULL xact_start and backend_type unless the role is superuser or
// has the privileges of pg_read_all_stats. pg_locks has no such filter: every transaction holds the lock
// on its own virtual transaction id while it runs, so those transactions are listed by pid and virtual
// id ("pid/vxid"). read_at is the statement's start, before either view was read.
const reconcileHorizonSQL = `WITH c AS (SELECT clock_timestamp() AS now)
SELECT now, least(now, (SELECT min(xact_start) FROM pg_stat_activity
  WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid())),
  statement_timestamp(),
  ARRAY(SELECT l.pid::text || '/' || l.virtualxid FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid()
      AND a.datname = current_database() AND a.backend_type IS NULL)
FROM c`

// Horizon is what a pass reads before it writes any marker.
type Horizon struct {
	Now     time.Time // the database's clock
	Horizon time.Time // Now, or the start of the earliest client transaction open then
	ReadAt  time.Time // the statement's start
	Hidden  []string  // the transactions of other roles whose start the role cannot read: "pid/vxid"
}

// ReadHorizon reads the database's clock and the horizon (reconcileHorizonSQL).
func ReadHorizon(ctx context.Context, db bun.IDB) (Horizon, error) {
	var h Horizon
	err := db.NewRaw(reconcileHorizonSQL).Scan(ctx, &h.Now, &h.Horizon, &h.ReadAt, pgdialect.Array(&h.Hidden))
	return h, err
}

// reconcileStreamCursorsSQL reads, in one statement, the snapshots of streamsql.BoundingSnapshots as text
// (NULL without a cursor row), the name and snap_from of each cursor row, then the xmax of the statement's
// snapshot and the clock.
const reconcileStreamCursorsSQL = `SELECT (SELECT array_agg(b.snap::text) FROM (` + streamsql.BoundingSnapshots + `) b),
  (SELECT array_agg(cr.name ORDER BY cr.name) FROM ` + streamsql.CursorRows + ` cr),
  (SELECT array_agg(cr.snap_from::text ORDER BY cr.name) FROM ` + streamsql.CursorRows + ` cr),
  pg_snapshot_xmax(pg_current_snapshot())::text, clock_timestamp()`

// StreamCursors is what a reconciler's pass reads of the stream's cursors before it writes its markers.
type StreamCursors struct {
	// Bounds are snapshots such that a streamed row delivered after the read is not visible in one of
	// them (streamsql.BoundingSnapshots); none without a cursor row.
	Bounds []string
	// Names and Snaps are each cursor row's name and snap_from: a row its cursor row judged (by name, else
	// the base's, see streamsql.Cursor) delivered after the read is not visible in that row's snap_from.
	Names, Snaps []string
	// XMax is the next xid to be assigned at the read, and At the clock after it.
	XMax string
	At   time.Time
}

// ReadStreamCursors reads the stream's cursors (reconcileStreamCursorsSQL).
func ReadStreamCursors(ctx context.Context, db bun.IDB, names tables.Names) (StreamCursors, error) {
	var c StreamCursors
	err := ReadWithoutJIT(ctx, db, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(names.SQL(reconcileStreamCursorsSQL)).Scan(ctx, pgdialect.Array(&c.Bounds),
			pgdialect.Array(&c.Names), pgdialect.Array(&c.Snaps), &c.XMax, &c.At)
	})
	return c, err
}

// reconcilePageSQL reads a page of the rows to check, keyset-paginated on (published_at, id), or with
// scheduled on (process_at, id). A row whose process_at is within Window or ahead is swept however long ago
// it was published: its task cannot have run before process_at, nor left Redis before TaskRetention after
// that. Grouped events (model.WithGroup) are left out: asynq deletes a group's tasks once it has
// aggregated them, so a missing task of theirs proves nothing. Cancelled events are left out: their
// tasks are meant to be gone.
const (
	reconcilePageSQL = `SELECT id, event_id, event_name, queue, published_at, process_at, published_at AS page_key
FROM outbox_events
WHERE published_at >= ?0 AND published_at <= ?1 AND (published_at, id) > (?2, ?3) AND task_group IS NULL
  AND cancelled_at IS NULL
  AND (cardinality(?4::text[]) = 0 OR queue = ANY(?4::text[])) AND NOT (queue = ANY(?5::text[]))
ORDER BY published_at, id
LIMIT ?6`
	reconcileScheduledPageSQL = `SELECT id, event_id, event_name, queue, published_at, process_at, process_at AS page_key
FROM outbox_events
WHERE process_at >= ?0 AND published_at < ?0 AND (process_at, id) > (?2, ?3) AND task_group IS NULL
  AND cancelled_at IS NULL
  AND (cardinality(?4::text[]) = 0 OR queue = ANY(?4::text[])) AND NOT (queue = ANY(?5::text[]))
ORDER BY process_at, id
LIMIT ?6`
)

// Page is a page of rows to read: published within [From, To] (or, with Scheduled, published before From
// with a process_at at or after From), of Queues only (when any) and of none of NotQueues, after the
// page key (AfterAt or AfterXID, AfterID), Limit rows at most.
type Page struct {
	From, To  time.Time
	Queues    []string
	NotQueues []string
	Scheduled bool
	AfterAt   time.Time
	AfterXID  string
	AfterID   int64
	Limit     int
	// ToXID is, for the streamed rows, the greatest xid to read (at most: MaxXID).
	ToXID string
	// SinceNames and SinceSnaps are, for the streamed rows, the cursor rows read by the previous pass
	// (StreamCursors.Names, Snaps): only the rows not visible in the snap_from of the cursor row that
	// judged them then are read, those that may have been delivered since. Nil: any.
	SinceNames, SinceSnaps []string
}

// MaxXID is the greatest xid8: Page.ToXID when the read has no end.
const MaxXID = "18446744073709551615"

// ReadPublishedPage reads a page of the published rows of the per-row path, in (published_at, id) order
// (with Scheduled, (process_at, id)).
func ReadPublishedPage(ctx context.Context, db bun.IDB, names tables.Names, p Page) ([]ReconcileRow, error) {
	query := reconcilePageSQL
	if p.Scheduled {
		query = reconcileScheduledPageSQL
	}
	var rows []ReconcileRow
	err := db.NewRaw(names.SQL(query), p.From, p.To, p.AfterAt, p.AfterID, pgdialect.Array(nonNil(p.Queues)),
		pgdialect.Array(nonNil(p.NotQueues)), p.Limit).Scan(ctx, &rows)
	return rows, err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// reconcileStreamFirstSQL reads the least xid of the streamed rows created within [?0, ?1] (NULL: none).
const reconcileStreamFirstSQL = `SELECT min(e.xid)::text FROM outbox_events e
WHERE e.published_at = 'infinity' AND e.created_at >= ?0 AND e.created_at <= ?1`

// FirstStreamedXID reads the least xid of the streamed rows created within [from, to] (NULL: none): a read
// of every streamed row the table keeps.
func FirstStreamedXID(ctx context.Context, db bun.IDB, names tables.Names, from, to time.Time) (sql.NullString, error) {
	var first sql.NullString
	err := db.NewRaw(names.SQL(reconcileStreamFirstSQL), from, to).Scan(ctx, &first)
	return first, err
}

// StreamedPageSQL reads a page of the delivered streamed rows created within [?0, ?1], and with
// scheduled those created before ?0 whose process_at is at or after it, keyset-paginated on (xid, id)
// after (?2, ?3) up to the xid ?7, of the queues ?4 (all when empty) but ?5, ?6 at most. With the cursor
// rows' names ?8 and snap_froms ?9 (NULL: any row), only the rows not visible in the snap_from of the
// cursor row that judged them (their lane's when it was there, else the base's): those delivered since.
// Grouped and cancelled events are left out, as in reconcilePageSQL.
func StreamedPageSQL(scheduled bool) string {
	window := `e.created_at >= ?0 AND e.created_at <= ?1`
	if scheduled {
		window = `e.process_at >= ?0 AND e.created_at < ?0`
	}
	return `SELECT e.id, e.event_id, e.event_name, e.queue, e.created_at AS published_at, e.process_at,
  e.created_at AS page_key, true AS streamed, e.xid::text AS page_xid
FROM outbox_events e ` + streamsql.Cursor + `
  LEFT JOIN (SELECT name, snap::pg_snapshot AS snap FROM unnest(?8::text[], ?9::text[]) AS u(name, snap) OFFSET 0) pl
    ON pl.name = ` + streamsql.LaneOf + `
  LEFT JOIN (SELECT snap::pg_snapshot AS snap FROM unnest(?8::text[], ?9::text[]) AS u(name, snap) WHERE name = 'outbox' OFFSET 0) pb
    ON true
WHERE e.published_at = 'infinity' AND (e.xid, e.id) > (?2::xid8, ?3::bigint) AND e.xid <= ?7::xid8
  AND (?8::text[] IS NULL OR NOT coalesce(pg_visible_in_snapshot(e.xid, coalesce(pl.snap, pb.snap)), false))
  AND ` + streamsql.Delivered + ` AND ` + window + ` AND e.task_group IS NULL AND e.cancelled_at IS NULL
  AND (cardinality(?4::text[]) = 0 OR e.queue = ANY(?4::text[])) AND NOT (e.queue = ANY(?5::text[]))
ORDER BY e.xid, e.id
LIMIT ?6`
}

// ReadStreamedPage reads a page of the delivered streamed rows (StreamedPageSQL) in (xid, id) order.
func ReadStreamedPage(ctx context.Context, db bun.IDB, names tables.Names, p Page) ([]ReconcileRow, error) {
	var rows []ReconcileRow
	to := p.ToXID
	if to == "" {
		to = MaxXID
	}
	var sinceNames, sinceSnaps any // NULL
	if p.SinceNames != nil {
		sinceNames, sinceSnaps = pgdialect.Array(p.SinceNames), pgdialect.Array(p.SinceSnaps)
	}
	err := db.NewRaw(names.SQL(StreamedPageSQL(p.Scheduled)), p.From, p.To, p.AfterXID, p.AfterID,
		pgdialect.Array(nonNil(p.Queues)), pgdialect.Array(nonNil(p.NotQueues)), p.Limit, to, sinceNames, sinceSnaps).Scan(ctx, &rows)
	return rows, err
}

// RequeueMissing clears published_at of the rows that are still exactly as read (same published_at; a
// streamed row still in the stream, which the cursor, moving only forward, still has delivered), so the
// relay enqueues them again, their last_error lastError: a streamed row becomes a pending row of the
// per-row path. Never of a keyed row seen completed, which would be handled after the events of its key
// that followed it, nor of a cancelled one. It returns how many rows it changed.
func RequeueMissing(ctx context.Context, db bun.IDB, names tables.Names, rows []ReconcileRow, lastError string) (int, error) {
	ids := make([]int64, len(rows))
	at := make([]time.Time, len(rows))
	streamed := make([]bool, len(rows))
	for i, row := range rows {
		ids[i], at[i], streamed[i] = row.ID, row.PublishedAt, row.Streamed
	}
	res, err := db.NewRaw(names.SQL(`UPDATE outbox_events AS o
SET published_at = NULL, next_attempt_at = NULL, last_error = ?
FROM unnest(?::bigint[], ?::timestamptz[], ?::boolean[]) AS m(id, published_at, streamed)
WHERE o.id = m.id AND CASE WHEN m.streamed THEN o.published_at = 'infinity' ELSE o.published_at = m.published_at END
  AND o.completed_at IS NULL AND o.cancelled_at IS NULL`),
		lastError, pgdialect.Array(ids), pgdialect.Array(at), pgdialect.Array(streamed)).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// recordMarkSQL records the mark (?0 at, ?1 next xid) unless one was recorded less than ?3 seconds before
// it, and deletes the marks recorded before ?2.
const recordMarkSQL = `WITH gone AS (DELETE FROM bunbox_stream_marks WHERE at < ?2)
INSERT INTO bunbox_stream_marks (at, next_xid) SELECT ?0, ?1::xid8
WHERE NOT EXISTS (SELECT 1 FROM bunbox_stream_marks WHERE at > ?0::timestamptz - make_interval(secs => ?3))
ON CONFLICT (at) DO NOTHING`

// RecordMark records in bunbox_stream_marks that xmax was the next xid at at, unless a mark was recorded
// less than every before it, and deletes the marks recorded before before.
func RecordMark(ctx context.Context, db bun.IDB, names tables.Names, at time.Time, xmax string, before time.Time, every time.Duration) error {
	_, err := db.NewRaw(names.SQL(recordMarkSQL), at, xmax, before, every.Seconds()).Exec(ctx)
	return err
}

// RecordedMark reads the latest mark recorded before before; false without one.
func RecordedMark(ctx context.Context, db bun.IDB, names tables.Names, before time.Time) (xmax string, at time.Time, ok bool, err error) {
	err = db.NewRaw(names.SQL(`SELECT next_xid::text, at FROM bunbox_stream_marks WHERE at < ?0 ORDER BY at DESC LIMIT 1`), before).
		Scan(ctx, &xmax, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return "", time.Time{}, false, nil
	}
	return xmax, at, err == nil, err
}
