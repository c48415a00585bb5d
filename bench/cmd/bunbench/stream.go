package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// The arms "bunbox relay" and "bunbox per-row": relay.New with its zero Config on a freshly migrated outbox,
// where the migrations turned the stream on (20261209000001_bunbox_stream_default), so that every row is in
// the stream (published_at 'infinity', xid = its transaction's id) and the relay delivers it by moving the
// snapshot cursor past it, with no per-row UPDATE; and the same relay on an outbox where relay.DisableStream
// was called, so that every row is a pending row of the per-row path (claimed, enqueued, marked published by
// an UPDATE). Both backlogs are written in transactions of backlogTx events, as the prototypes' backlogs.

// backlogTx is how many events each transaction of a backlog writes: a backlog of many transactions, as
// producers leave one, rather than one transaction whose rows all share an xid.
const backlogTx = 1000

// streamOn checks that the outbox in db's schema has the stream on, as every freshly migrated outbox has.
func streamOn(ctx context.Context, db *bun.DB) error {
	on, err := relay.StreamEnabled(ctx, db, model.Location{})
	if err != nil {
		return err
	}
	if !on {
		return errors.New("the stream is off on a freshly migrated outbox (relay.StreamEnabled): the migrations should turn it on (20261209000001_bunbox_stream_default)")
	}
	return nil
}

// disableStream turns the stream off for the outbox in db's schema (the default table names): its new rows
// are pending rows of the per-row path.
func disableStream(ctx context.Context, db *bun.DB) error {
	if err := relay.DisableStream(ctx, db, model.Location{}); err != nil {
		return fmt.Errorf("relay.DisableStream: %w", err)
	}
	on, err := relay.StreamEnabled(ctx, db, model.Location{})
	if err != nil {
		return err
	}
	if on {
		return errors.New("relay.DisableStream returned, but relay.StreamEnabled says the stream is on")
	}
	return nil
}

// fillBacklog writes a backlog of n events into bunbox's table, backlogTx events per transaction, checks
// that every row is streamed (streamed: published_at 'infinity', xid set) or a pending row of the per-row
// path (published_at NULL), then vacuums the table and checkpoints, as a committed backlog: after the
// CHECKPOINT each arm's first change to a page writes a full-page image to the WAL, as a relay draining a
// backlog written before the last checkpoint does.
func fillBacklog(ctx context.Context, db *bun.DB, queue string, n int, streamed bool) error {
	which, what := "published_at = 'infinity' AND xid IS NOT NULL", "streamed (published_at 'infinity', xid set): is the stream on?"
	if !streamed {
		which, what = "published_at IS NULL AND dead_at IS NULL", "pending rows of the per-row path (published_at NULL): is the stream off?"
	}
	count := func() (int64, error) {
		var c int64
		err := db.NewRaw("SELECT count(*) FROM outbox_events WHERE "+which).Scan(ctx, &c)
		return c, err
	}
	before, err := count()
	if err != nil {
		return err
	}
	for done := 0; done < n; done += backlogTx {
		if _, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload)
SELECT gen_random_uuid(), 'bench.event', ?, ? FROM generate_series(1, ?)`, queue, string(drainPayload), min(backlogTx, n-done)); err != nil {
			return err
		}
	}
	after, err := count()
	if err != nil {
		return err
	}
	if after-before != int64(n) {
		return fmt.Errorf("the backlog: %d of the %d rows written are %s", after-before, n, what)
	}
	return vacuumAndCheckpoint(ctx, db, "outbox_events")
}

// fillStream is fillBacklog of a streamed backlog.
func fillStream(ctx context.Context, db *bun.DB, queue string, n int) error {
	return fillBacklog(ctx, db, queue, n, true)
}

// drainRelay drains a backlog with a relay of Config cfg on a freshly migrated outbox: with the stream on
// (streamed, the default) or after relay.DisableStream (the per-row path). It then checks what the relay
// left: every row delivered once (the queue holds n tasks; streamed: no streamed row waits and none was
// handed to the per-row path; per-row: every row marked published, none pending or dead). A streamed drain
// that does not finish within the cap fails the run (env.fail: at its end, with the stream's state; a relay
// without the stream round never delivers these rows), its round reported as capped meanwhile; a per-row
// drain that hits the cap is reported as capped.
func drainRelay(cfg relay.Config, streamed bool) func(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	return func(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
		return drainRelayConfig(ctx, e, cfg, streamed, n, cap)
	}
}

func drainRelayConfig(ctx context.Context, e *env, cfg relay.Config, streamed bool, n int, cap time.Duration) (float64, bool, error) {
	db, _, err := e.schema(ctx, 20, true)
	if err != nil {
		return 0, false, err
	}
	q := e.queue("relay")
	defer e.dropQueue(q)
	if streamed {
		err = streamOn(ctx, db)
	} else {
		err = disableStream(ctx, db)
	}
	if err != nil {
		return 0, false, err
	}
	if err := fillBacklog(ctx, db, q, n, streamed); err != nil {
		return 0, false, err
	}
	rate, capped, err := relayDrainConfig(ctx, db, e.redis, cfg, n, cap, e.cur)
	if err != nil {
		return 0, false, err
	}
	if capped && !streamed {
		return rate, true, e.cur.vacuumAfter(ctx, db, "outbox_events")
	}
	st, serr := readStreamState(ctx, db)
	if capped { // the run goes on, to keep the other arms' figures, and ends with an error that says this
		e.fail(fmt.Sprintf("the stream's drain of %d events did not finish within -drain-cap %s: %.0f events/s until then, "+
			"%s (a relay that has no stream round leaves streamed rows alone; on a slow machine raise -drain-cap)",
			n, cap, rate, st.describe(serr)))
		return rate, true, nil
	}
	if serr != nil {
		return 0, false, serr
	}
	check := checkStreamDrained
	if !streamed {
		check = checkPerRowDrained
	}
	if err := check(e, q, n, st); err != nil {
		return 0, false, err
	}
	return rate, false, e.cur.vacuumAfter(ctx, db, "outbox_events")
}

// streamState is what a streamed outbox holds, by the states of internal/streamsql.
type streamState struct {
	delivered, waiting int64 // streamed rows the cursor has passed, and those it has not
	pending, published int64 // classic rows (or handed over): published_at NULL and not dead, and a real timestamp
	dead               int64
	snapFrom, snapTo   string
	afterXid           string
	afterID            int64
	movedAgo           time.Duration
	cursorRow, enabled bool
}

func readStreamState(ctx context.Context, db bun.IDB) (streamState, error) {
	var st streamState
	err := db.NewRaw(`SELECT count(*) FILTER (WHERE `+streamsql.Delivered+`),
  count(*) FILTER (WHERE `+streamsql.Waiting+`),
  count(*) FILTER (WHERE e.published_at IS NULL AND e.dead_at IS NULL),
  count(*) FILTER (WHERE e.published_at IS NOT NULL AND e.published_at <> 'infinity'),
  count(*) FILTER (WHERE e.dead_at IS NOT NULL)
FROM outbox_events e `+streamsql.Cursor).Scan(ctx, &st.delivered, &st.waiting, &st.pending, &st.published, &st.dead)
	if err != nil {
		return st, err
	}
	var moved float64
	err = db.NewRaw(`SELECT snap_from::text, coalesce(snap_to::text, ''), coalesce(after_xid::text, ''), coalesce(after_id, 0),
  extract(epoch FROM clock_timestamp() - moved_at) FROM `+streamsql.CursorRows+` cr ORDER BY moved_at DESC LIMIT 1`). // the cursor (base or lane) that moved last
		Scan(ctx, &st.snapFrom, &st.snapTo, &st.afterXid, &st.afterID, &moved)
	switch {
	case err == nil:
		st.cursorRow, st.movedAgo = true, time.Duration(moved*float64(time.Second))
	case isNoRows(err):
		err = nil
	}
	if err == nil {
		st.enabled, err = relay.StreamEnabled(ctx, db, model.Location{})
	}
	return st, err
}

// describe says the state in a sentence, for an error.
func (st streamState) describe(err error) string {
	if err != nil {
		return fmt.Sprintf("the stream's state could not be read: %v", err)
	}
	cursor := "no cursor row"
	if st.cursorRow {
		cursor = fmt.Sprintf("cursor snap_from %s, snap_to %q, after (%s, %d), moved %s ago", st.snapFrom, st.snapTo,
			st.afterXid, st.afterID, st.movedAgo.Round(time.Millisecond))
	}
	return fmt.Sprintf("streamed rows: %d delivered, %d waiting; classic or handed-over rows: %d pending, %d published, %d dead; %s; stream on: %t",
		st.delivered, st.waiting, st.pending, st.published, st.dead, cursor, st.enabled)
}

// checkStreamDrained fails unless the stream delivered the backlog of n rows once: queue q holds n tasks, no
// streamed row waits, and no row left the stream (none pending, published by a per-row mark, or dead).
func checkStreamDrained(e *env, q string, n int, st streamState) error {
	if st.delivered != int64(n) || st.waiting != 0 || st.pending != 0 || st.published != 0 || st.dead != 0 {
		return fmt.Errorf("after the drain of %d streamed rows, %s", n, st.describe(nil))
	}
	return checkDelivered(e, q, n, 0)
}

// checkPerRowDrained fails unless the per-row path delivered the backlog of n rows once: queue q holds n
// tasks, every row is marked published, none is pending, dead or in the stream.
func checkPerRowDrained(e *env, q string, n int, st streamState) error {
	if st.published != int64(n) || st.pending != 0 || st.dead != 0 || st.delivered != 0 || st.waiting != 0 {
		return fmt.Errorf("after the per-row drain of %d rows, %s", n, st.describe(nil))
	}
	return checkDelivered(e, q, n, 0)
}

// streamReadSQL and streamReadAfterSQL are the stream round's read (relay/stream_read.go's, their text
// since the position became the second half's start), timed on their own by streamReadTime with the
// cursor's values as their arguments, as the round binds them after it locked the cursor row: from, to, the
// least xid to read, the position's xid and id, the limit, and from's xip list as an array literal. The
// round runs streamReadAfterSQL when the position is at or past from's xmax.
var (
	streamReadSQL      = streamReadPair(`xid >= pg_snapshot_xmax(?0::pg_snapshot)`)
	streamReadAfterSQL = streamReadPair(`(xid, id) > (?3::xid8, ?4::bigint)`)
)

func streamReadPair(secondFrom string) string {
	return streamReadPart(`xid = ANY(?6::xid8[]) AND xid >= ?2::xid8`) + `
UNION ALL
` + streamReadPart(secondFrom+` AND xid < pg_snapshot_xmax(?1::pg_snapshot)`) + `
ORDER BY stream_xid, id
LIMIT ?5`
}

func streamReadPart(xidCond string) string {
	return `(SELECT id, event_id, event_name, queue, payload, metadata, created_at, attempts,
  process_at, max_retry, coalesce(timeout_ns, 0), deadline, coalesce(task_group, ''), coalesce(retention_ns, 0),
  coalesce(ordering_key, ''), payload_encoded,
  CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload)
    ELSE octet_length(payload::text) END
  + CASE WHEN pg_column_compression(metadata) IS NULL THEN pg_column_size(metadata)
    ELSE octet_length(metadata::text) END
  + coalesce(pg_column_size(payload_encoded), 0) AS row_size, xid AS stream_xid,
  cancelled_at IS NOT NULL AS cancelled, cancelled_at IS NOT NULL AND cancel_settled_at IS NULL AS unsettled
FROM outbox_events
WHERE ` + xidCond + `
  AND published_at = 'infinity'::timestamptz
  AND pg_visible_in_snapshot(xid, ?1::pg_snapshot)
  AND (xid > ?3::xid8 OR (xid = ?3::xid8 AND id > ?4::bigint))
ORDER BY xid, id
LIMIT ?5)`
}

// streamReadTime times streamReadSQL of 500 rows 21 times, each in a transaction rolled back that first
// sets what the stream round sets for its reads (relay/stream_round.go's streamBounds: JIT, bitmap scans and
// sorts off) and reads the cursor row (not locked: a round of the relay holds it; snap_to NULL: the pair a
// round would open now, up to the current snapshot), and returns the median in ms.
func streamReadTime(ctx context.Context, db *bun.DB) (float64, error) {
	return medianTxTime(ctx, db, func(ctx context.Context, tx bun.Tx) (string, []any, error) {
		if _, err := tx.ExecContext(ctx, `SELECT set_config(name, setting, true) FROM (VALUES ('jit', 'off'),
  ('enable_bitmapscan', 'off'), ('enable_sort', 'off')) AS s(name, setting)`); err != nil {
			return "", nil, err
		}
		var from, to, afterXid string
		var afterID int64
		if err := tx.NewRaw(`SELECT snap_from::text, coalesce(snap_to, pg_current_snapshot())::text,
  coalesce(after_xid, '0')::text, coalesce(after_id, -9223372036854775807) FROM `+streamsql.CursorRows+` cr WHERE name = 'outbox'`).
			Scan(ctx, &from, &to, &afterXid, &afterID); err != nil {
			return "", nil, err
		}
		xip, query := "{}", streamReadSQL
		parts := strings.SplitN(from, ":", 3)
		if len(parts) == 3 {
			xip = "{" + parts[2] + "}"
		}
		if len(parts) >= 2 {
			x, _ := strconv.ParseUint(afterXid, 10, 64)
			xmax, _ := strconv.ParseUint(parts[1], 10, 64)
			if x != 0 && x >= xmax {
				query = streamReadAfterSQL
			}
		}
		return query, []any{from, to, afterXid, afterXid, afterID, 500, xip}, nil
	})
}

// medianQueryTime runs query 21 times, each in a transaction rolled back, reads every row, and returns the
// median time in ms.
func medianQueryTime(ctx context.Context, db *bun.DB, query string) (float64, error) {
	return medianTxTime(ctx, db, func(context.Context, bun.Tx) (string, []any, error) { return query, nil, nil })
}

// medianTxTime runs the query that prep returns 21 times, each in a transaction rolled back (prep runs in
// it first, and its statements count in the time, as the round's cursor read does), reads every row, and returns the median time in ms.
func medianTxTime(ctx context.Context, db *bun.DB,
	prep func(context.Context, bun.Tx) (string, []any, error),
) (float64, error) {
	var ms []float64
	for range 21 {
		start := time.Now()
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			query, args, err := prep(ctx, tx)
			if err != nil {
				return err
			}
			rows, err := tx.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				return err
			}
			return errRollback
		})
		if err != errRollback {
			return 0, err
		}
		ms = append(ms, time.Since(start).Seconds()*1000)
	}
	return median(ms), nil
}
