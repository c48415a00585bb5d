package outboxtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// DeliverStream moves the snapshot cursors (the base and the lanes', see
// relay.EnableStream) past every streamed row
// committed now, as a relay's stream round does once it has enqueued them: they are delivered from then on
// (they are not enqueued: a test that needs their tasks enqueues them itself). Streamed rows written
// later wait until the next call. The stream must be on (the cursor row exists).
func DeliverStream(tb testing.TB, db bun.IDB) {
	tb.Helper()
	var n int
	err := db.QueryRowContext(context.Background(), streamsql.Moved(`pg_current_snapshot(), NULL, NULL, NULL,
  c.system_id, c.max_id, now()`, `true`)).Scan(&n)
	if err != nil {
		tb.Fatalf("move the stream's cursor: %v", err)
	}
	if n < 1 {
		tb.Fatalf("move the stream's cursor: no cursor row (is the stream on?)")
	}
}

// StreamOff reports BUNBOX_TEST_STREAM=off: the pass of make test that runs the tests with the snapshot
// stream turned off after the migrations (the per-row path alone, as relay.DisableStream leaves an
// outbox), while that switch exists.
func StreamOff() bool { return os.Getenv("BUNBOX_TEST_STREAM") == "off" }

// migrateUp applies bunbox's migrations to the outbox at loc and, in the StreamOff pass, turns the stream
// off as relay.DisableStream does on an outbox with no rows (the test kit cannot import the relay).
func migrateUp(ctx context.Context, db *bun.DB, loc model.Location) error {
	if err := bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(loc)); err != nil {
		return err
	}
	if !StreamOff() {
		return nil
	}
	names, err := tables.New(loc.Schema, loc.TablePrefix)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, names.SQL(streamOffSQL)); err != nil {
		return fmt.Errorf("turn the stream off (BUNBOX_TEST_STREAM=off): %w", err)
	}
	return nil
}

// streamOffSQL is relay.DisableStream's ALTER (internal/store), for an outbox with no rows yet.
const streamOffSQL = `ALTER TABLE outbox_events ALTER COLUMN xid DROP DEFAULT, ALTER COLUMN published_at DROP DEFAULT`

// undeliveredSQL counts the rows of the default outbox not delivered: a row of the per-row path with no
// published_at (pending or dead), or a streamed row the cursor has not passed (internal/streamsql.Waiting),
// meeting the condition that follows.
const undeliveredSQL = `SELECT count(*) FROM (SELECT e.* FROM outbox_events e ` + streamsql.Cursor + `
WHERE e.published_at IS NULL OR ` + streamsql.Waiting + `) AS e WHERE `

// CountUndelivered counts the rows of db's default outbox not delivered (what published_at IS NULL
// counts on the per-row path), whether the stream is on or off, that also meet where (SQL on
// outbox_events aliased e; "" for all).
func CountUndelivered(tb testing.TB, db bun.IDB, where string, args ...any) int64 {
	tb.Helper()
	return countWhere(tb, db, undeliveredSQL, where, args)
}

// countWhere runs query, a count of a subquery's rows aliased e (only outbox_events' columns, so that a
// condition's column names are never ambiguous) that ends with WHERE, for the rows that meet where ("" for
// all).
func countWhere(tb testing.TB, db bun.IDB, query, where string, args []any) int64 {
	tb.Helper()
	if where == "" {
		where = "true"
	}
	var n int64
	if err := db.NewRaw(query+"("+where+")", args...).Scan(context.Background(), &n); err != nil {
		tb.Fatalf("count the rows where %s: %v", where, err)
	}
	return n
}

// deliveredSQL counts the rows of the default outbox that were delivered: published by the per-row path,
// or streamed rows the cursor has passed (internal/streamsql.Delivered), meeting ?0.
const deliveredSQL = `SELECT count(*) FROM (SELECT e.* FROM outbox_events e ` + streamsql.Cursor + `
WHERE (e.published_at IS NOT NULL AND e.published_at <> ` + streamsql.Sentinel + `) OR ` + streamsql.Delivered + `) AS e WHERE `

// CountDelivered counts the rows of db's default outbox that were delivered, whether by the per-row path
// or by the stream, that also meet where (SQL on outbox_events aliased e; "" for all).
func CountDelivered(tb testing.TB, db bun.IDB, where string, args ...any) int64 {
	tb.Helper()
	return countWhere(tb, db, deliveredSQL, where, args)
}

// DeliveredIDs returns the event ids of the delivered rows of db's default outbox (see CountDelivered),
// as text.
func DeliveredIDs(tb testing.TB, db bun.IDB) []string {
	tb.Helper()
	var ids []string
	query := strings.Replace(deliveredSQL, "count(*)", "e.event_id::text", 1) + "true"
	if err := db.NewRaw(query).Scan(context.Background(), &ids); err != nil {
		tb.Fatalf("read the delivered rows: %v", err)
	}
	return ids
}
