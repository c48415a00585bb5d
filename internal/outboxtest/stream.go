package outboxtest

import (
	"context"
	"testing"

	"github.com/uptrace/bun"
)

// DeliverStream moves the snapshot cursors (bunbox_stream's rows, the base and the lanes', see
// relay.EnableStream) past every streamed row
// committed now, as a relay's stream round does once it has enqueued them: they are delivered from then on
// (they are not enqueued: a test that needs their tasks enqueues them itself). Streamed rows written
// later wait until the next call. The stream must be on (the cursor row exists).
func DeliverStream(tb testing.TB, db bun.IDB) {
	tb.Helper()
	res, err := db.ExecContext(context.Background(), `UPDATE bunbox_stream SET snap_from = pg_current_snapshot(),
  snap_to = NULL, after_xid = NULL, after_id = NULL, moved_at = now()`)
	if err != nil {
		tb.Fatalf("move the stream's cursor: %v", err)
	}
	if n, _ := res.RowsAffected(); n < 1 {
		tb.Fatalf("move the stream's cursor: no cursor row (is the stream on?)")
	}
}
