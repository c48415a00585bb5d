package relay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// TestStreamReadIsBoundedByThePair: with many delivered streamed rows kept (the retention's), the first
// read of a pair and the idle check read a few buffers, not the kept rows: the index scans start where the
// pair's rows begin. Before the bound was a scalar, the first read walked outbox_events_stream_idx from
// its first entry (a row comparison was the scan's start).
func TestStreamReadIsBoundedByThePair(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db := streamWithKeptRows(t, 20000)
	insertStreamed(t, db, "new", 5)
	_, err := db.ExecContext(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)

	r := bareRelay(db)
	require.True(t, r.rounds.stream.due(ctx))
	laneCursor(t, r)
	onlyTestLane(t, db)
	require.Less(t, buffers(t, db, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.LanesDueSQL), 60, "the idle check reads the kept rows")

	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		c := openPair(t, tx, r)
		read, err := r.rounds.stream.read(ctx, tx, c, 500, 1<<20)
		require.NoError(t, err)
		require.Len(t, read.events, 5)
		for _, ev := range read.events {
			require.Equal(t, "new", ev.Name)
		}
		var plan json.RawMessage
		require.NoError(t, tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.StreamReadSQL,
			c.From.String, c.To.String, "0", "0", int64(-1<<62), 500, store.SnapshotXip(c.From.String), c.Queue, c.Slice).Scan(&plan))
		require.Less(t, planBuffers(t, plan), 60, "the first read of the pair reads the kept rows")
		return nil
	})
	require.NoError(t, err)
}

// streamWithKeptRows returns a schema with the stream on and kept streamed rows, all delivered: the
// cursor passed them, as rounds would (outboxtest.DeliverStream).
func streamWithKeptRows(t *testing.T, kept int) *bun.DB {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	require.NoError(t, EnableStream(context.Background(), db, model.Location{}))
	insertStreamed(t, db, "kept", kept)
	outboxtest.DeliverStream(t, db)
	return db
}

// streamWithNewRowsAnalyzed is streamWithKeptRows(t, 20000) with 5,000 streamed rows named "new" written
// after them in five transactions, not delivered, and the table analyzed.
func streamWithNewRowsAnalyzed(t *testing.T) *bun.DB {
	t.Helper()
	db := streamWithKeptRows(t, 20000)
	for range 5 {
		insertStreamed(t, db, "new", 1000)
	}
	_, err := db.ExecContext(context.Background(), `ANALYZE outbox_events`)
	require.NoError(t, err)
	return db
}

// insertStreamed writes n streamed rows named name in one transaction (one statement), all in the lane of
// the default queue's slice 0 (testLane).
func insertStreamed(t *testing.T, db *bun.DB, name string, n int) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, payload, stream_slice)
SELECT gen_random_uuid(), ?, '{}', 0 FROM generate_series(1, ?)`, name, n)
	require.NoError(t, err)
}

// buffers runs an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) query and returns the buffers its plan touched.
func buffers(t *testing.T, db *bun.DB, query string, args ...any) int {
	t.Helper()
	var plan json.RawMessage
	require.NoError(t, db.QueryRowContext(context.Background(), query, args...).Scan(&plan))
	return planBuffers(t, plan)
}

func planBuffers(t *testing.T, plan json.RawMessage) int {
	t.Helper()
	var out []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(plan, &out))
	require.Len(t, out, 1)
	t.Logf("buffers: %d hit, %d read", out[0].Plan.Hit, out[0].Plan.Read)
	if testing.Verbose() && out[0].Plan.Hit+out[0].Plan.Read >= 60 {
		t.Logf("plan: %s", plan)
	}
	return out[0].Plan.Hit + out[0].Plan.Read
}

// TestStreamReadMidPairStartsAtThePosition: in the middle of a pair, with the position inside a
// transaction that wrote many rows and statistics that count many rows after it, the read starts at the
// position (it does not walk the rows of that transaction it has passed) and the idle check walks the
// index, not the table (a plain EXISTS was planned as a sequential scan after such an ANALYZE).
func TestStreamReadMidPairStartsAtThePosition(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db := streamWithKeptRows(t, 20000)
	const big = 4000
	insertStreamed(t, db, "big", big) // one transaction

	r := bareRelay(db)
	var ids []int64
	tx, err := db.BeginTx(ctx, nil) // a round that reads three quarters of the big transaction
	require.NoError(t, err)
	c := openPair(t, tx, r)
	read, err := r.rounds.stream.read(ctx, tx, c, big*3/4, 1<<30)
	require.NoError(t, err)
	require.Len(t, read.events, big*3/4)
	last := len(read.events) - 1
	require.NoError(t, r.rounds.commitStream(ctx, tx, c, read.xids[last], read.events[last].ID, false, read.events[last].ID))
	_, err = db.ExecContext(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)

	c = laneCursor(t, r)
	require.True(t, c.To.Valid, "a pair open, its position in the big transaction")
	require.True(t, r.rounds.stream.due(ctx))
	onlyTestLane(t, db)
	require.Less(t, buffers(t, db, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.LanesDueSQL), 20,
		"the idle check walks the table or the passed rows")

	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		c, ok, err := r.rounds.stream.st.LockLane(ctx, tx, []string{testLane})
		require.NoError(t, err)
		require.True(t, ok)
		read, err := r.rounds.stream.read(ctx, tx, c, big, 1<<30)
		require.NoError(t, err)
		require.Len(t, read.events, big/4, "the rest of the big transaction")
		for _, ev := range read.events {
			require.Greater(t, ev.ID, c.AfterID.Int64)
			ids = append(ids, ev.ID)
		}
		var plan json.RawMessage
		require.NoError(t, tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.StreamReadAfterSQL,
			c.From.String, c.To.String, c.AfterXid.String, c.AfterXid.String, c.AfterID.Int64, 10,
			store.SnapshotXip(c.From.String), c.Queue, c.Slice).Scan(&plan))
		require.Less(t, planBuffers(t, plan), 10, "a read of 10 rows after the position walks the rows before it")
		return nil
	})
	require.NoError(t, err)
	require.Len(t, ids, big/4)
}

// The count of waiting streamed rows that bunbox status, the metrics and the dead-row reports make
// (streamsql.PendingRows) reads the stream index from the cursor on, not every delivered row kept. Its lower
// bound is known only when the statement runs: alone, the planner took a third of the table for it, and
// with 10 M delivered rows kept (bunbench -parts keptdrain) it planned a sequential scan of them. The
// estimate is what the per-lane ranges (streamsql.PendingRows) bound, at any size: this test checks it and the
// count. (Not the buffers the count reads: the lower bound is the xmin of the cursor's snapshot, and a
// transaction of another test open when the cursor moved puts it below the kept rows, as in CI's pooler run.)
func TestStreamPendingCountIsBoundedByTheCursor(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	const kept = 20000
	db := streamWithKeptRows(t, kept)
	insertStreamed(t, db, "new", 5)
	_, err := db.ExecContext(ctx, "ANALYZE outbox_events")
	require.NoError(t, err)
	count := "SELECT count(*) FROM " + streamsql.PendingRows + " e"
	var n int
	require.NoError(t, db.NewRaw(count).Scan(ctx, &n))
	require.Equal(t, 5, n)
	var plan json.RawMessage
	require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+count).Scan(&plan))
	est := scanEstimate(t, plan, "outbox_events")
	t.Logf("the planner's estimate of the rows it reads from outbox_events: %.0f of %d", est, kept+5)
	require.Less(t, est, float64(kept)/100)
}

// A count of the waiting streamed rows (bunbox status, the metrics, the page) reads bunbox_stream a few
// times per statement, not once per row it judges, and no delivered row. Looked up per row, each lookup of
// a cursor row walks every version of it the xmin horizon keeps: under a transaction holding the horizon
// for 10 minutes at 1,000 events/s, the count ran for more than 8 minutes (bunbench -sustain-hold-xmin).
// And the base cursor row ('outbox'), which moves only when lanes are added, must not make it read every
// streamed row written since it moved, delivered or not.
func TestStreamPendingCountReadsTheCursorRowsOnce(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	const delivered, waiting = 5000, 300
	db := privateStreamWithLanes(t)
	insertStreamed(t, db, "delivered", delivered)
	// The lanes deliver them, as a relay's rounds do; the base row stays where the lanes were added.
	moveLanes(t, db)
	for range 3 {
		insertStreamed(t, db, "new", waiting/3)
	}
	count := "SELECT count(*) FROM " + streamsql.PendingRows + " e"
	var n int
	require.NoError(t, db.NewRaw(count).Scan(ctx, &n))
	require.Equal(t, waiting, n)
	var plan json.RawMessage
	require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+count).Scan(&plan))
	cursorLoops, _ := scanActuals(t, plan, "bunbox_stream")
	positionLoops, _ := scanActuals(t, plan, "bunbox_stream_positions")
	_, eventsRead := scanActuals(t, plan, "outbox_events")
	t.Logf("scans of bunbox_stream run: %d, of bunbox_stream_positions: %d; rows of outbox_events read: %d (%d waiting, %d delivered)",
		cursorLoops, positionLoops, eventsRead, waiting, delivered)
	require.Less(t, cursorLoops, 20, "bunbox_stream is read per row")
	require.Less(t, positionLoops, 4*20, "bunbox_stream_positions is read per row")
	require.Less(t, eventsRead, waiting+delivered/10, "the count reads the delivered rows")
}

// Under a transaction that holds the xmin horizon (open, with a transaction id), the count of waiting
// streamed rows (bunbox status, the metrics) and the reconciler's bounding snapshots read the rows that
// wait, not every row delivered since that transaction began: each cursor's snapshot keeps its xid as
// the xmin, and a read from that xmin walked them all (0.9 s a count after 5 minutes at 1,000 events/s,
// bunbench -sustain-hold-xmin).
func TestStreamPendingCountUnderAHeldHorizon(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	const delivered, waiting = 5000, 30
	db := privateStreamWithLanes(t)
	hold, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	_, err = hold.ExecContext(ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)
	// The lanes deliver the rows in a few moves, as a relay's rounds do, each snapshot with the held xid
	// as its xmin.
	for range 5 {
		insertStreamed(t, db, "delivered", delivered/5)
		moveLanes(t, db)
	}
	insertStreamed(t, db, "new", waiting)

	count := "SELECT count(*) FROM " + streamsql.PendingRows + " e"
	var n int
	require.NoError(t, db.NewRaw(count).Scan(ctx, &n))
	require.Equal(t, waiting, n)
	read := func(query string) int {
		t.Helper()
		var plan json.RawMessage
		require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+query).Scan(&plan))
		_, rows := scanActuals(t, plan, "outbox_events")
		return rows
	}
	counted := read(count)
	bounding := read("SELECT count(*) FROM (" + streamsql.BoundingSnapshots + ") b")
	t.Logf("rows of outbox_events read by the count: %d, by the bounding snapshots: %d (%d waiting, %d delivered under the hold)",
		counted, bounding, waiting, delivered)
	require.Less(t, counted, waiting+delivered/10, "the count reads the rows delivered under the hold")
	require.Less(t, bounding, waiting+delivered/10, "the bounding snapshots read the rows delivered under the hold")
}

// privateStreamWithLanes is an outbox on a PostgreSQL of the test's own (another test's open transaction
// would hold the lanes' snapshots back), with the stream on and the lanes' cursor rows made from 10
// delivered rows.
func privateStreamWithLanes(t *testing.T) *bun.DB {
	t.Helper()
	db := outboxtest.StartPostgres(t).Schema(t)
	require.NoError(t, EnableStream(context.Background(), db, model.Location{}))
	insertStreamed(t, db, "kept", 10)
	outboxtest.DeliverStream(t, db)
	laneCursor(t, bareRelay(db))
	return db
}

// moveLanes moves every lane's cursor to the current snapshot, as a relay's rounds do when they deliver
// what it holds; the base row stays where it is.
func moveLanes(t *testing.T, db *bun.DB) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), streamsql.Moved(`pg_current_snapshot(), NULL, NULL, NULL, c.system_id, c.max_id, now()`,
		`c.queue IS NOT NULL`))
	require.NoError(t, err)
}

// scanActuals returns how many times the plan (EXPLAIN ANALYZE FORMAT JSON) ran a scan of relation, and
// how many rows those scans read (returned or removed by a filter), its subqueries included.
func scanActuals(t *testing.T, plan json.RawMessage, relation string) (loops, rows int) {
	t.Helper()
	type node struct {
		Relation string  `json:"Relation Name"`
		Rows     float64 `json:"Actual Rows"`
		Loops    float64 `json:"Actual Loops"`
		Removed  float64 `json:"Rows Removed by Filter"`
		Plans    []json.RawMessage
	}
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var n node
		require.NoError(t, json.Unmarshal(raw, &n))
		if n.Relation == relation {
			loops += int(n.Loops)
			rows += int((n.Rows + n.Removed) * n.Loops)
		}
		for _, p := range n.Plans {
			walk(p)
		}
	}
	var out []struct{ Plan json.RawMessage }
	require.NoError(t, json.Unmarshal(plan, &out))
	require.Len(t, out, 1)
	walk(out[0].Plan)
	return loops, rows
}

// scanEstimate returns the rows the planner expects from the scans of relation in a plan (EXPLAIN FORMAT
// JSON), added up, but for those in the plan's subqueries (InitPlan, SubPlan): the count's lower bound
// (streamsql.BoundingSnapshots) looks up each lane's first waiting row, which the planner estimates as if it
// read the lane, where it stops at the first.
func scanEstimate(t *testing.T, plan json.RawMessage, relation string) float64 {
	t.Helper()
	type node struct {
		Relation string  `json:"Relation Name"`
		Rows     float64 `json:"Plan Rows"`
		Parent   string  `json:"Parent Relationship"`
		Plans    []json.RawMessage
	}
	var walk func(raw json.RawMessage) float64
	walk = func(raw json.RawMessage) float64 {
		var n node
		require.NoError(t, json.Unmarshal(raw, &n))
		if n.Parent == "InitPlan" || n.Parent == "SubPlan" {
			return 0
		}
		sum := 0.0
		if n.Relation == relation {
			sum = n.Rows
		}
		for _, p := range n.Plans {
			sum += walk(p)
		}
		return sum
	}
	var out []struct{ Plan json.RawMessage }
	require.NoError(t, json.Unmarshal(plan, &out))
	require.Len(t, out, 1)
	return walk(out[0].Plan)
}

// The read of a pair keeps to the index's order whatever the planner makes of the statistics. With 10 M
// rows kept and an ANALYZE that sampled few of the pair's rows (bunbench -parts keptdrain), the planner took
// the pair for 169 rows (49,000) and chose to read its every remaining row with a bitmap scan and sort them,
// at each read of 500: 1,364 buffers and 63 ms (the server's auto_explain), where the index reads about 20.
// Such statistics take millions of rows to build; here a random_page_cost that makes the index look dear
// leads the planner to the same plan, which the stream round's settings (streamBounds) must rule out.
func TestStreamReadKeepsToTheIndex(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db := streamWithNewRowsAnalyzed(t)
	r := bareRelay(db)
	explain := func(bounds sessionBounds) string {
		tx, err := beginBounded(ctx, db, bounds)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, "SET LOCAL random_page_cost = 1000")
		require.NoError(t, err)
		c := openPair(t, tx, r)
		read, err := r.rounds.stream.read(ctx, tx, c, 1500, 1<<30) // a position in the pair's second transaction
		require.NoError(t, err)
		last := len(read.events) - 1
		c.AfterXid.String, c.AfterXid.Valid = read.xids[last], true
		c.AfterID.Int64, c.AfterID.Valid = read.events[last].ID, true
		var plan json.RawMessage
		require.NoError(t, tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.StreamReadAfterSQL,
			c.From.String, c.To.String, c.AfterXid.String, c.AfterXid.String, c.AfterID.Int64, 500,
			store.SnapshotXip(c.From.String), c.Queue, c.Slice).Scan(&plan))
		t.Logf("%d buffers", planBuffers(t, plan))
		return string(plan)
	}
	require.True(t, strings.Contains(explain(Config{}.bounds()), `"Sort"`), "the planner keeps to the index anyway: the test shows nothing")
	defaults := Config{}.withDefaults()
	plan := explain((&streamReader{cfg: &defaults}).bounds())
	require.False(t, strings.Contains(plan, `"Sort"`), "the read sorts the pair's rows")
	require.False(t, strings.Contains(plan, `"Bitmap Heap Scan"`), "the read scans the pair's rows by bitmap")
}

// testLane is the lane of the rows insertStreamed writes.
const testLane = "outbox/default/0"

// onlyTestLane deletes the cursor rows of the lanes but testLane (none holds a row), so that the idle
// check's buffers are testLane's.
func onlyTestLane(t *testing.T, db *bun.DB) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), `DELETE FROM bunbox_stream WHERE queue IS NOT NULL AND name <> ?`, testLane)
	require.NoError(t, err)
}

// laneCursor reads testLane's cursor row, once r created the lanes.
func laneCursor(t *testing.T, r *Relay) streamCursor {
	t.Helper()
	ctx := context.Background()
	r.rounds.stream.lanes(ctx, true)
	cs, _, err := r.rounds.stream.st.LanesDue(ctx, r.db)
	require.NoError(t, err)
	for _, c := range cs {
		if c.Name == testLane {
			return c
		}
	}
	t.Fatalf("no lane %s among %d", testLane, len(cs))
	return streamCursor{}
}

// openPair locks the cursor in tx, as a stream round does, and opens a pair up to now.
func openPair(t *testing.T, tx bun.Tx, r *Relay) streamCursor {
	t.Helper()
	ctx := context.Background()
	r.rounds.stream.lanes(ctx, true)
	c, ok, err := r.rounds.stream.st.LockLane(ctx, tx, []string{testLane})
	require.NoError(t, err)
	require.True(t, ok)
	to, err := r.rounds.stream.st.CurrentSnapshot(ctx, tx)
	require.NoError(t, err)
	c.To.String, c.To.Valid = to, true
	return c
}
