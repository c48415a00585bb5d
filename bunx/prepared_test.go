package bunx_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// preparedRuns is how many times bunx's prepared outbox INSERTs (with $n placeholders: pgx also prepares
// the literal statements it is given) have run on tx's connection (pg_prepared_statements is per connection).
func preparedRuns(t *testing.T, ctx context.Context, tx bun.Tx) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.NewRaw(`SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements
		WHERE statement LIKE 'INSERT INTO outbox_events %' AND statement LIKE '%VALUES ($1,%'`).Scan(ctx, &n))
	return n
}

// writesPrepared runs write in a transaction until one run of it writes with a prepared statement (the
// first run of a shape prepares it in the background), and fails the test if none does within 30 s. It
// returns what the last run of write returned.
func writesPrepared(t *testing.T, db *bun.DB, write func(ctx context.Context, tx bun.Tx) error) {
	t.Helper()
	ctx := context.Background()
	outboxtest.WaitFor(t, 30*time.Second, "a write with the prepared INSERT", func() bool {
		prepared := false
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			before := preparedRuns(t, ctx, tx)
			if err := write(ctx, tx); err != nil {
				return err
			}
			prepared = preparedRuns(t, ctx, tx) == before+1
			return nil
		}))
		return prepared
	})
}

// TestHookWritesPrepared checks that with WithPreparedStatements a model hook's events, and Record's, go
// through the prepared INSERT on the transaction's own connection, and that by default
// none is ever prepared. It fails if bunx no longer reaches the
// *sql.Tx under a hook's query (bun's layout changed).
func TestHookWritesPrepared(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "it checks pg_prepared_statements on a direct connection; behind a transaction pooler WithPreparedStatements is not for use")
	b := setup(t, bunx.WithPreparedStatements())
	n := 0
	writesPrepared(t, b.db, func(ctx context.Context, tx bun.Tx) error {
		n++
		_, err := tx.NewInsert().Model(&Order{Ref: "hook-" + uuid.NewString()}).Exec(ctx)
		return err
	})
	writesPrepared(t, b.db, func(ctx context.Context, tx bun.Tx) error {
		n++
		ev, err := model.NewEvent("order.noted", orderEvent{Ref: "rec"})
		if err != nil {
			return err
		}
		if err := b.ob.Record(ctx, tx, ev); err != nil {
			return err
		}
		if ev.ID == 0 || ev.CreatedAt.IsZero() {
			return errors.New("Record did not read the id and created_at back")
		}
		return nil
	})
	require.EqualValues(t, n, outboxtest.Count(t, b.db, "outbox_events", ""), "one event per write, prepared or not")

	db, _ := outboxtest.Schema(t)
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(context.Background())
	require.NoError(t, err)
	byDefault := bunx.New(db)
	bunx.OnInsert(byDefault, func(_ context.Context, o *Order) ([]*model.Event, error) {
		ev, err := model.NewEvent("order.placed", orderEvent{ID: o.ID, Ref: o.Ref})
		return []*model.Event{ev}, err
	})
	ctx := context.Background()
	for range 40 {
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			ev, err := model.NewEvent("order.noted", orderEvent{Ref: "lit"})
			require.NoError(t, err)
			require.NoError(t, byDefault.Record(ctx, tx, ev))
			_, err = tx.NewInsert().Model(&Order{Ref: "lit-" + uuid.NewString()}).Exec(ctx)
			require.NoError(t, err)
			// pgx prepares every statement it queries, the literal INSERT too: count bunx's own, with $n.
			var prepared int64
			require.NoError(t, tx.NewRaw(`SELECT count(*) FROM pg_prepared_statements
				WHERE statement LIKE 'INSERT INTO outbox_events %' AND statement LIKE '%VALUES ($1,%'`).Scan(ctx, &prepared))
			require.Zero(t, prepared, "the default prepares nothing")
			return nil
		}))
	}
}

// TestPreparedWritesWhatLiteralWrites writes events that set every column, one and three in a statement,
// with the prepared INSERT and with the literal one, and reads back the same rows.
func TestPreparedWritesWhatLiteralWrites(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "WithPreparedStatements is not for use behind a transaction pooler")
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	prepared := bunx.New(db, bunx.WithPreparedStatements())
	literal := bunx.New(db)
	at := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	events := func(n int) []*model.Event {
		evs := make([]*model.Event, n)
		for i := range evs {
			var err error
			// An ordering key and a group cannot be combined: the events take one or the other in turn.
			keyOrGroup := model.WithOrderingKey("key'1")
			if (i+n)%2 == 0 {
				keyOrGroup = model.WithGroup("g'1")
			}
			evs[i], err = model.NewEvent("odd.values", json.RawMessage(`{"q":"it's ? and ?name","bs":"a\\b","u":"héllo ✓"}`),
				model.WithQueue("q?name"), model.WithMetadata("k'ey", "v?al \\"), model.WithProcessAt(at),
				model.WithMaxRetry(3), model.WithTimeout(90*time.Second), model.WithDeadline(at.Add(time.Hour)),
				model.WithTaskRetention(2*time.Hour), keyOrGroup)
			require.NoError(t, err)
		}
		evs[0].MaxRetry = nil // a column some rows of the statement set and others leave NULL
		return evs
	}
	for _, n := range []int{1, 3} {
		var viaPrepared []*model.Event
		writesPrepared(t, db, func(ctx context.Context, tx bun.Tx) error {
			viaPrepared = events(n)
			return prepared.Record(ctx, tx, viaPrepared...)
		})
		viaLiteral := events(n)
		require.NoError(t, literal.Record(ctx, db, viaLiteral...))

		read := func(evs []*model.Event) []model.Event {
			ids := make([]int64, len(evs))
			for i, ev := range evs {
				ids[i] = ev.ID
			}
			var rows []model.Event
			require.NoError(t, db.NewSelect().Model(&rows).Where("id IN (?)", bun.List(ids)).Order("id").Scan(ctx))
			require.Len(t, rows, len(evs))
			for i := range rows {
				require.Equal(t, evs[i].EventID, rows[i].EventID)
				require.True(t, evs[i].CreatedAt.Equal(rows[i].CreatedAt), "Record read created_at back")
				rows[i].ID, rows[i].EventID, rows[i].CreatedAt = 0, uuid.Nil, time.Time{}
			}
			return rows
		}
		require.Equal(t, read(viaLiteral), read(viaPrepared), "%d events", n)
	}
}

// TestPreparedKeepsTheGuarantees checks the prepared INSERT against the write's guarantees: a duplicate
// event id fails with ErrDuplicateEvent and writes nothing, and a rolled back transaction takes its
// events with it.
func TestPreparedKeepsTheGuarantees(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "WithPreparedStatements is not for use behind a transaction pooler")
	ctx := context.Background()
	b := setup(t, bunx.WithPreparedStatements())
	writesPrepared(t, b.db, func(ctx context.Context, tx bun.Tx) error {
		ev, err := model.NewEvent("order.noted", orderEvent{Ref: "warm"})
		if err != nil {
			return err
		}
		return b.ob.Record(ctx, tx, ev)
	})
	before := outboxtest.Count(t, b.db, "outbox_events", "")

	ev, err := model.NewEvent("order.noted", orderEvent{Ref: "dup"})
	require.NoError(t, err)
	require.NoError(t, b.ob.Record(ctx, b.db, ev))
	again, err := model.NewEvent("order.noted", orderEvent{Ref: "dup"}, model.WithEventID(ev.EventID))
	require.NoError(t, err)
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&PlainOrder{Ref: "dup"}).Exec(ctx); err != nil {
			return err
		}
		return b.ob.Record(ctx, tx, again)
	})
	require.ErrorIs(t, err, bunx.ErrDuplicateEvent)
	require.ErrorContains(t, err, ev.EventID.String())
	require.Zero(t, outboxtest.Count(t, b.db, "orders", "ref = 'dup'"), "the business row rolled back with the failed write")

	rollback := errors.New("roll back")
	for range 20 {
		err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&Order{Ref: "rb-" + uuid.NewString()}).Exec(ctx); err != nil {
				return err
			}
			return rollback
		})
		require.ErrorIs(t, err, rollback)
	}
	require.Equal(t, before+1, outboxtest.Count(t, b.db, "outbox_events", ""), "only the one committed event")
}

// TestPreparedLostTurnsLiteral loses bunx's prepared statements on a connection (DEALLOCATE, as a pooler
// in transaction mode would by handing the transaction another server connection): that write fails with
// an error that says so and rolls back, and the writes after it use the literal INSERT.
func TestPreparedLostTurnsLiteral(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "WithPreparedStatements is not for use behind a transaction pooler")
	ctx := context.Background()
	b := setup(t, bunx.WithPreparedStatements())
	writesPrepared(t, b.db, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&Order{Ref: "warm-" + uuid.NewString()}).Exec(ctx)
		return err
	})
	// deallocate drops bunx's statements on tx's connection (not pgx's own cache, which DEALLOCATE ALL
	// would leave stale) and reports whether there were any.
	deallocate := func(ctx context.Context, tx bun.Tx) bool {
		var names []string
		require.NoError(t, tx.NewRaw(`SELECT name FROM pg_prepared_statements
			WHERE statement LIKE 'INSERT INTO outbox_events %' AND statement LIKE '%VALUES ($1,%'`).Scan(ctx, &names))
		for _, name := range names {
			_, err := tx.ExecContext(ctx, "DEALLOCATE ?", bun.Ident(name))
			require.NoError(t, err)
		}
		return len(names) > 0
	}

	// Until the write lands on a connection that has the statement, there is nothing to lose.
	var lost string
	outboxtest.WaitFor(t, 30*time.Second, "a write that lost its prepared statement", func() bool {
		ref := "lost-" + uuid.NewString()
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if !deallocate(ctx, tx) {
				return errors.New("none prepared here")
			}
			_, err := tx.NewInsert().Model(&Order{Ref: ref}).Exec(ctx)
			return err
		})
		if err == nil || err.Error() == "none prepared here" {
			return false
		}
		require.ErrorContains(t, err, "lost or confused bunx's prepared outbox INSERT")
		lost = ref
		return true
	})
	require.Zero(t, outboxtest.Count(t, b.db, "orders", "ref = ?", lost), "the failed write rolled back")
	before := outboxtest.Count(t, b.db, "outbox_events", "")

	for range 5 {
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			deallocate(ctx, tx)
			_, err := tx.NewInsert().Model(&Order{Ref: "after-" + uuid.NewString()}).Exec(ctx)
			return err
		}), "the writes after the loss use the literal INSERT")
	}
	require.Equal(t, before+5, outboxtest.Count(t, b.db, "outbox_events", ""))
}
