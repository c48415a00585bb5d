package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// insertSized commits one event per size, each with a payload that is a JSON string of that many bytes
// in all, and no metadata.
func insertSized(t *testing.T, db bun.IDB, queue string, sizes ...int) []*model.Event {
	t.Helper()
	events := make([]*model.Event, len(sizes))
	for i, n := range sizes {
		ev, err := model.NewEvent("test.sized", json.RawMessage(`"`+strings.Repeat("x", n-2)+`"`), model.WithQueue(queue))
		require.NoError(t, err)
		events[i] = ev
	}
	_, err := db.NewInsert().Model(&events).Exec(context.Background())
	require.NoError(t, err)
	return events
}

// rowSizes reads the size store.ClaimBudgetSQL counts for each row, in id order.
func rowSizes(t *testing.T, db bun.IDB) []int64 {
	t.Helper()
	var sizes []int64
	require.NoError(t, db.NewRaw("SELECT "+store.RowSize+" FROM outbox_events ORDER BY id").Scan(context.Background(), &sizes))
	return sizes
}

// A claim takes rows in id order while their bytes fit in BatchBytes, and always the first row.
func TestClaimStopsAtTheByteBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		sizes  []int                 // payload bytes
		budget func(s []int64) int64 // from the sizes the claim counts
		batch  int
		want   []int // rows claimed by each round
	}{
		{"AllFit", []int{100, 100, 100}, func(s []int64) int64 { return s[0] + s[1] + s[2] }, 0, []int{3}},
		{"StopsBeforeTheRowThatWouldGoOver", []int{100, 100, 100, 100}, func(s []int64) int64 { return s[0] + s[1] + s[2] - 1 }, 0, []int{2, 2}},
		{"FirstRowOverTheBudgetGoesAlone", []int{1000, 100, 100}, func(s []int64) int64 { return s[1] }, 0, []int{1, 1, 1}},
		{"BigRowAfterSmallOnesWaits", []int{100, 5000, 100}, func(s []int64) int64 { return s[0] + s[2] + 10 }, 0, []int{1, 1, 1}},
		{"BatchSizeStillBounds", []int{8, 8, 8, 8, 8}, func([]int64) int64 { return 1 << 20 }, 2, []int{2, 2, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupPerRow(t)
			events := insertSized(t, b.db, b.queue, tt.sizes...)
			r := b.newRelay(t, Config{BatchBytes: tt.budget(rowSizes(t, b.db)), BatchSize: tt.batch})
			var got []int
			for range len(tt.want) + 1 {
				res := r.rounds.runRounds(context.Background())
				require.NoError(t, res.Err)
				if res.Claimed == 0 {
					break
				}
				require.Equal(t, res.Claimed, res.Published)
				got = append(got, res.Claimed)
			}
			require.Equal(t, tt.want, got, "rows per round")
			requireDeliveredOnce(t, b.inspector, b.queue, events)
		})
	}
}

// The size of a row counts the JSON text of its payload, also when PostgreSQL stored it compressed into a
// small part of that, and is close to it for a payload stored as it is; and the bytes of payload_encoded
// as the relay receives them, also when PostgreSQL stored them compressed (the bytes of a bytes event,
// model.NewBytesEvent, may compress).
func TestClaimRowSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, payload_encoded)
VALUES (gen_random_uuid(), 'e', 'q', to_jsonb(repeat('x', 100000)), NULL),
       (gen_random_uuid(), 'e', 'q', to_jsonb(repeat('x', 1000)), NULL),
       (gen_random_uuid(), 'e', 'q', 'null', convert_to(repeat('x', 100000), 'UTF8'))`)
	require.NoError(t, err)
	var stored []int64
	require.NoError(t, b.db.NewRaw(`SELECT coalesce(pg_column_size(payload_encoded), pg_column_size(payload))
FROM outbox_events ORDER BY id`).Scan(ctx, &stored))
	require.Less(t, stored[0], int64(10000), "the test needs the big payload stored compressed")
	require.Less(t, stored[2], int64(10000), "the test needs the big bytes stored compressed")
	sizes := rowSizes(t, b.db)
	require.InDelta(t, 100002+2, sizes[0], 10, "the JSON text of the payload, and the few bytes of the metadata {}")
	require.InDelta(t, 1002+2, sizes[1], 50, "the stored size of a payload kept as it is")
	require.InDelta(t, 100000+14, sizes[2], 10, "the bytes of payload_encoded, and the few of the payload null and the metadata {}")
}

// Rows written around bunx that break a limit are marked dead in the round that claims them, with an
// error naming the limit, and the rows around them are delivered.
func TestOverLimitRowsDeadAtOnce(t *testing.T) {
	t.Parallel()
	tooMany := map[string]string{}
	for i := range wire.MaxMetadataCount + 1 {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	tooManyJSON, err := json.Marshal(tooMany)
	require.NoError(t, err)
	for _, tt := range []struct {
		name, eventName, metadata, wantErr string
	}{
		{"TooManyMetadataKeys", "test.event", string(tooManyJSON), "over the limit of 32 (MaxMetadataCount)"},
		{"MetadataKeyTooLong", "test.event", `{"` + strings.Repeat("k", 200) + `": "v"}`, "(MaxMetadataKeyLength)"},
		{"MetadataValueTooLong", "test.event", `{"k": "` + strings.Repeat("v", 5000) + `"}`, "(MaxMetadataValueLength)"},
		{"MetadataTooBig", "test.event", bigMetadata(t), "(MaxMetadataSize)"},
		{"MetadataColumnHuge", "test.event", `{"k": "` + strings.Repeat("\\u0001", 20000) + `"}`, "column metadata is"},
		{"MetadataNotStrings", "test.event", `{"tenant": 7}`, "column metadata must be a JSON object of strings"},
		{"NameWithSpace", "test event", `{}`, "must not contain spaces"},
		{"EmptyName", "", `{}`, "Name must not be empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			before := insertEvents(t, b.db, b.queue, 5)
			_, err := b.db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata)
VALUES (gen_random_uuid(), ?, ?, '{}', ?::jsonb)`, tt.eventName, b.queue, tt.metadata)
			require.NoError(t, err)
			after := insertEvents(t, b.db, b.queue, 5)

			r := b.newRelay(t, Config{MaxAttempts: 5})
			res := r.rounds.runAll(context.Background())
			require.NoError(t, res.Err)
			require.Equal(t, 10, res.Published)
			require.Equal(t, 1, res.Dead)
			requireDeliveredOnce(t, b.inspector, b.queue, append(before, after...))

			var attempts int
			var lastError string
			require.NoError(t, b.db.QueryRowContext(context.Background(),
				`SELECT attempts, last_error FROM outbox_events WHERE dead_at IS NOT NULL`).Scan(&attempts, &lastError))
			require.Equal(t, 1, attempts)
			require.Contains(t, lastError, "malformed outbox row")
			require.Contains(t, lastError, tt.wantErr)
		})
	}
}

// bigMetadata is a metadata object within the count and value limits but over MaxMetadataSize.
func bigMetadata(t *testing.T) string {
	md := map[string]string{}
	for i := range 5 {
		md[fmt.Sprintf("k%d", i)] = strings.Repeat("v", wire.MaxMetadataValueLength)
	}
	data, err := json.Marshal(md)
	require.NoError(t, err)
	return string(data)
}

func TestClaimSizer(t *testing.T) {
	t.Parallel()
	rows := func(n, size int) []model.Event {
		evs := make([]model.Event, n)
		for i := range evs {
			evs[i].Payload = make(json.RawMessage, size-2) // and 2 bytes of metadata: {}
		}
		return evs
	}
	var s claimSizer
	require.Equal(t, 500, s.limit(500, 16<<20), "no claim yet: the batch size")
	require.False(t, s.observe(nil, 500, 16<<20))
	require.Equal(t, 500, s.limit(500, 16<<20), "an empty claim tells nothing")

	require.True(t, s.observe(rows(500, 100), 500, 16<<20), "as many rows as asked for: full")
	require.Equal(t, 500, s.limit(500, 16<<20), "small rows: the batch size bounds")

	require.True(t, s.observe(rows(16, 1<<20), 500, 16<<20), "the budget's worth of bytes: full")
	require.Equal(t, 16+4+1, s.limit(500, 16<<20), "1 MiB rows: what the budget holds, a quarter more and one")
	require.Equal(t, 1, s.limit(500, 1000), "a budget below one row: one row")

	require.False(t, s.observe(rows(3, 1<<20), 21, 16<<20), "fewer rows and bytes than allowed: the backlog is drained")
}

// The claim cut at the byte budget as the relay reads the rows (what it runs while rows are small) takes
// the same rows as the claim cut by PostgreSQL's window (what it runs when they may be large).
func TestClaimCutsAlikeWithAndWithoutTheWindow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		sizes  []int
		budget func(s []int64) int64
		batch  int
		want   int // rows of the first claim
	}{
		{"AllFit", []int{100, 100, 100}, func(s []int64) int64 { return s[0] + s[1] + s[2] }, 10, 3},
		{"StopsBeforeTheRowThatWouldGoOver", []int{100, 100, 100, 100}, func(s []int64) int64 { return s[0] + s[1] + s[2] - 1 }, 10, 2},
		{"FirstRowOverTheBudgetGoesAlone", []int{1000, 100, 100}, func(s []int64) int64 { return s[1] }, 10, 1},
		{"BigRowAfterSmallOnesWaits", []int{100, 5000, 100}, func(s []int64) int64 { return s[0] + s[2] + 10 }, 10, 1},
		{"BatchSizeStillBounds", []int{8, 8, 8, 8, 8}, func([]int64) int64 { return 1 << 20 }, 2, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupPerRow(t)
			events := insertSized(t, b.db, b.queue, tt.sizes...)
			budget := tt.budget(rowSizes(t, b.db))
			for _, windowed := range []bool{false, true} {
				tx, err := b.db.BeginTx(context.Background(), nil)
				require.NoError(t, err)
				claimed, bad, err := claim(context.Background(), tx, store.NewClaims(tables.Default(), store.NewPrepared(context.Background(), nil, false, tables.Default())), tt.batch, budget, windowed)
				require.NoError(t, tx.Rollback())
				require.NoError(t, err)
				require.Empty(t, bad)
				var got []string
				for _, ev := range claimed {
					got = append(got, ev.EventID.String())
				}
				var want []string
				for _, ev := range events[:tt.want] {
					want = append(want, ev.EventID.String())
				}
				require.Equal(t, want, got, "windowed=%v", windowed)
			}
		})
	}
}

// The relay cuts at the budget in PostgreSQL for its first claim and after large rows, and leaves the cut
// to its own read of the rows only while they are small next to the budget.
func TestClaimSizerWindowed(t *testing.T) {
	t.Parallel()
	var s claimSizer
	require.True(t, s.windowed(500, 16<<20), "the first claim knows no row size")
	s.meanRow.Store(100)
	require.False(t, s.windowed(500, 16<<20), "500 rows of 100 bytes in 16 MiB")
	require.True(t, s.windowed(500, 100_000), "500 rows of 100 bytes are over a quarter of 100 kB")
	s.meanRow.Store(1 << 20)
	require.True(t, s.windowed(20, 16<<20), "rows of 1 MiB")
}

// The first claim of a relay, which knows no row size yet, locks about what BatchBytes holds of large
// rows, not BatchSize of them: PostgreSQL would read and measure each row it locks.
func TestFirstClaimRespectsTheByteBudget(t *testing.T) {
	t.Parallel()
	b := setupPerRow(t)
	ctx := context.Background()
	sizes := make([]int, 30)
	for i := range sizes {
		sizes[i] = 512 << 10
	}
	insertSized(t, b.db, b.queue, sizes...)
	r := b.newRelay(t, Config{BatchSize: 30, BatchBytes: 2 << 20})

	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	var res BatchEvent
	events, _ := r.rounds.rows.read(ctx, tx, &res)
	require.NoError(t, res.Err)
	require.Len(t, events, 3, "three rows of 512 KiB and a bit fit in 2 MiB")
	var unlocked int
	require.NoError(t, b.db.NewRaw(`SELECT count(*) FROM (SELECT id FROM outbox_events FOR UPDATE SKIP LOCKED) AS s`).
		Scan(ctx, &unlocked))
	// The sizer asks for what the budget holds at the sampled size, a quarter more and one: 3 + 0 + 1.
	require.LessOrEqual(t, 30-unlocked, 4, "rows the first claim locked")
	require.NoError(t, tx.Rollback())

	// The rounds that follow drain it all, a budget's worth each. A round that meets an outage (a Redis
	// read that times out on a loaded machine: these tasks are 512 KiB each) releases its rows uncharged,
	// and the next round takes them again.
	deadline := time.Now().Add(2 * time.Minute)
	for published(t, b.db) < 30 {
		require.True(t, time.Now().Before(deadline), "the rounds did not drain the rows in 2 minutes")
		res := r.rounds.runRounds(ctx)
		if res.Err != nil {
			require.False(t, taskOwn(res.Err), "a round failed for the task's own fault: %v", res.Err)
			t.Logf("a round met an outage and released its rows: %v", res.Err)
		}
		require.LessOrEqual(t, res.Claimed, 4)
	}
}
