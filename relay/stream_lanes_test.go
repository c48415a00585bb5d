package relay

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// laneHolders counts, per lane, the stream rounds that hold its cursor row (streamState.locked), and the
// most of them at once.
type laneHolders struct {
	mu      sync.Mutex
	held    map[string]int
	most    int // rounds of one lane at once, the most seen
	mostAll int // rounds of any lanes at once, the most seen
	all     int
	rounds  atomic.Int64
}

func (h *laneHolders) locked(lane string) func() {
	h.rounds.Add(1)
	h.mu.Lock()
	if h.held == nil {
		h.held = map[string]int{}
	}
	h.held[lane]++
	h.all++
	h.most, h.mostAll = max(h.most, h.held[lane]), max(h.mostAll, h.all)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.held[lane]--
		h.all--
		h.mu.Unlock()
	}
}

// Three relays over four slices share the stream: every lane's rounds one at a time, rounds of different
// lanes at once (the first round waits, holding its lane, until a round of another lane holds one), and
// every row enqueued once, its task in Redis once.
func TestStreamLanesThreeRelaysShareTheStream(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 400)
	var h laneHolders
	second := make(chan struct{})
	var first, closed sync.Once
	hook := func(lane string) func() {
		release := h.locked(lane)
		h.mu.Lock()
		together := h.all >= 2
		h.mu.Unlock()
		if together {
			closed.Do(func() { close(second) })
		}
		first.Do(func() {
			select {
			case <-second:
			case <-time.After(10 * time.Second):
				t.Error("no round of another lane while the first held its lane")
			}
		})
		return release
	}
	for range 3 {
		r := b.newRelay(t, Config{BatchSize: 40, Workers: 2, DisableReconciler: true})
		r.stream.locked = hook
		run(t, r)
	}
	for range 6 {
		events = append(events, b.record(t, b.db, 100)...)
	}
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "the cursors past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, 1, h.most, "rounds of one lane at once")
	require.GreaterOrEqual(t, h.mostAll, 2, "rounds of different lanes at once")
	require.Zero(t, countStream(t, b.db).Classic, "nothing handed over")
	require.Equal(t, int64(streamSlices), outboxtest.Count(t, b.db, "bunbox_stream", "queue = '"+b.queue+"'"),
		"a lane per slice of the queue")
}

// Three relays over four slices, one relay stopped (its ctx cancelled) in the middle of a round and the
// backends of rounds terminated (pg_terminate_backend, as a relay killed or cut off): every event's task is
// in Redis once, the lanes of the killed rounds are taken over, and the cursors pass every row.
func TestStreamLanesRelaysKilledAndStopped(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 600)
	var h laneHolders
	var killed atomic.Int64
	var kill, stopOnce sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stopped := make(chan error, 1)
	stopping := make(chan struct{})
	for i := range 3 {
		r := b.newRelay(t, Config{BatchSize: 30, Workers: 2, DisableReconciler: true})
		switch i {
		case 0: // its first round that holds a lane stops the relay; the others start after it
			r.stream.locked = func(lane string) func() {
				stopOnce.Do(func() { cancel(); close(stopping) })
				return h.locked(lane)
			}
			go func() { stopped <- r.Run(ctx) }()
			select {
			case <-stopping:
			case <-time.After(streamWait):
				t.Fatal("the first relay's round held no lane")
			}
		case 1: // its second round is terminated with every round then holding a lane
			// The round waits for the termination while it holds its lane, so that its backend is among
			// those terminated: in a goroutine of its own, the termination could come after every round
			// had committed (CI at ab55cb8: no round terminated).
			var n atomic.Int64
			r.stream.locked = func(lane string) func() {
				release := h.locked(lane)
				if n.Add(1) == 2 {
					kill.Do(func() { killed.Store(terminateStreamRound(t, b.db)) })
				}
				return release
			}
			run(t, r)
		default:
			r.stream.locked = h.locked
			run(t, r)
		}
	}
	for range 4 {
		events = append(events, b.record(t, b.db, 100)...)
	}
	require.NoError(t, <-stopped, "the stopped relay")
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "every row delivered", func() bool {
		c := countStream(t, b.db)
		return c.Waiting == 0 && outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL") == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	again := 0
	for _, ev := range events {
		require.Positive(t, b.enq.count(ev.EventID.String()), "event %s never enqueued", ev.EventID)
		if b.enq.count(ev.EventID.String()) > 1 {
			again++
		}
	}
	// (A terminated round goes on in its relay until its commit fails, beside the round that took its lane
	// over: the rounds of one lane at once are not counted here.)
	t.Logf("%d round backends terminated; %d events enqueued again (their TaskIDs absorbed it)", killed.Load(), again)
	require.Positive(t, killed.Load(), "no round terminated")
}

// The lanes' cursor rows start as copies of the base row and judge a row as the base did: rows the single
// cursor delivered before the lanes existed stay delivered, the others wait, and once lanes exist the base
// moves on (it judges no row of a lane with a cursor row).
func TestStreamLanesStartAsTheBase(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	before := b.record(t, b.db, 50)
	outboxtest.DeliverStream(t, b.db) // the base cursor past them, as a relay of one cursor would have
	waiting := b.record(t, b.db, 30)
	require.Zero(t, outboxtest.Count(t, b.db, "bunbox_stream", "queue IS NOT NULL"), "no lane yet")
	c := countStream(t, b.db)
	require.EqualValues(t, len(before), c.Delivered)
	require.EqualValues(t, len(waiting), c.Waiting)

	r := b.newRelay(t, Config{DisableReconciler: true})
	r.rounds.stream.lanes(ctx, true)
	require.Equal(t, int64(2*streamSlices), outboxtest.Count(t, b.db, "bunbox_stream", "queue IS NOT NULL"),
		"the lanes of the test's queue and of the default queue")
	c = countStream(t, b.db)
	require.EqualValues(t, len(before), c.Delivered, "judged by the lanes as by the base")
	require.EqualValues(t, len(waiting), c.Waiting)
	cs, _, err := store.NewStream(r.names).LanesDue(ctx, b.db)
	require.NoError(t, err)
	var base string
	require.NoError(t, b.db.NewRaw(`SELECT snap_from::text FROM `+streamsql.CursorRows+` cr WHERE name = 'outbox'`).Scan(ctx, &base))
	for _, l := range cs {
		require.NotEqual(t, base, l.From.String, "the base moved on past the lanes' copies")
	}

	run(t, r)
	all := append(before[:0:0], waiting...)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "the lanes past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(before)+len(waiting))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
	for _, ev := range before {
		require.Zero(t, b.enq.count(ev.EventID.String()), "a row the base had delivered was enqueued again")
	}
}

// A new queue's first streamed row gets its lane at once: a relay that finds it with no cursor row
// creates its lane and delivers it in that round, not after streamCheckInterval.
func TestStreamLanesNewQueue(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	r := b.newRelay(t, Config{DisableReconciler: true})
	run(t, r)
	other := b.queue + "_new"
	t.Cleanup(func() { _ = b.inspector.DeleteQueue(other, true) })
	events := recordEvents(t, b.ob, b.db, other, 5)
	outboxtest.WaitFor(t, streamWait, "the new queue's rows delivered", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	requireDeliveredOnce(t, b.inspector, other, events)
	require.Positive(t, outboxtest.Count(t, b.db, "bunbox_stream", "queue = '"+other+"'"))
}

// A relay whose role may not create the lanes' cursor rows (SELECT and UPDATE on bunbox_stream, the grant
// before the lanes; it moves the cursors in bunbox_stream_positions, and may not truncate its partitions)
// still delivers every streamed row once: the rows of a lane with no cursor row go to
// the per-row path, and it says so at Warn, naming the GRANT.
func TestStreamLanesWithoutInsertGrant(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	outboxtest.SkipPooled(t, "it connects as a role of its own, which a session SET cannot carry through a transaction pooler; the direct pass runs it")
	ctx := context.Background()
	admin, schema := outboxtest.Schema(t)
	require.NoError(t, EnableStream(ctx, admin, model.Location{}))
	role := "bunbox_nolanes_" + randHex(4)
	for _, q := range []string{
		`CREATE ROLE ` + role,
		`GRANT USAGE ON SCHEMA "` + schema + `" TO ` + role,
		`GRANT SELECT, UPDATE, DELETE ON outbox_events TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON bunbox_leases TO ` + role,
		`GRANT SELECT, UPDATE ON bunbox_stream TO ` + role,
		`GRANT SELECT, INSERT, DELETE ON bunbox_stream_positions TO ` + role, // DELETE, not TRUNCATE
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA "` + schema + `" TO ` + role,
	} {
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), `DROP OWNED BY `+role)
		_, _ = admin.ExecContext(context.Background(), `DROP ROLE `+role)
	})
	db := outboxtest.Open(t, map[string]any{"search_path": schema, "role": role})
	var user string
	require.NoError(t, db.NewRaw("SELECT current_user").Scan(ctx, &user))
	require.Equal(t, role, user)

	b := setupWith(t, db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	events := recordEvents(t, bunx.New(admin), admin, b.queue, 40)
	r := b.newRelay(t, Config{DisableReconciler: true})
	r.stream.rotateAfter = 1 // the base's moves rotate the positions: by DELETE, without TRUNCATE
	run(t, r)
	b.waitQueued(t, len(events))
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
	require.Zero(t, outboxtest.Count(t, admin, "bunbox_stream", "queue IS NOT NULL"), "no lane created")
	require.NotEmpty(t, b.logs.matching("may not create the stream's lanes"))
	outboxtest.WaitFor(t, streamWait, "the Warn of a rotation without TRUNCATE", func() bool {
		return len(b.logs.matching("may not truncate the partitions")) == 1
	})
}

// TestStreamLanesLookSkipsDeletedRows: cleanup deletes each lane's oldest rows, and until VACUUM removes
// them their entries lead the lane in outbox_events_stream_lane_idx. The look for the lanes that hold
// streamed rows (streamsql.Lanes, once a second per relay) lands on each lane's newest row, so it does not
// step over the deleted ones: walking forward, it read every one of them (0.66 s a look in the sustain run
// at 5,000 events/s with 5 minutes kept, once cleanup had begun).
func TestStreamLanesLookSkipsDeletedRows(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	db := privateStreamWithLanes(t)
	insert := func(name string, n int) {
		t.Helper()
		_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, stream_slice)
SELECT gen_random_uuid(), ?, '{}', i % 4 FROM generate_series(1, ?) AS i`, name, n)
		require.NoError(t, err)
	}
	insert("deleted", 20000)
	insert("kept", 8)
	// A transaction whose snapshot is older than the DELETE keeps the deleted rows' entries in the index,
	// as any transaction running across a cleanup does until it ends.
	hold, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	_, err = hold.ExecContext(ctx, "SELECT count(*) FROM outbox_events")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "DELETE FROM outbox_events WHERE event_name = 'deleted'")
	require.NoError(t, err)

	var lanes []string
	require.NoError(t, db.NewRaw("SELECT queue || '/' || slice FROM ("+streamsql.Lanes+") l ORDER BY 1").Scan(ctx, &lanes))
	require.Equal(t, []string{"default/0", "default/1", "default/2", "default/3"}, lanes)
	read := buffers(t, db, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM ("+streamsql.Lanes+") l")
	require.Less(t, read, 60, "the look for the lanes steps over the deleted rows")
}
