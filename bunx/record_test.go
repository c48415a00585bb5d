package bunx_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

func TestRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	a, err := model.NewEvent("stock.reserved", map[string]int{"sku": 7}, model.WithMetadata("tenant", "t1"))
	require.NoError(t, err)
	c, err := model.NewEvent("stock.released", nil, model.WithQueue("low"))
	require.NoError(t, err)

	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewUpdate().Model((*Order)(nil)).Set("status = 'x'").Where("TRUE").Exec(ctx)
		if err != nil {
			return err
		}
		return b.ob.Record(ctx, tx, a, c) // a set-based update: hooks cannot see it, Record can
	}))
	require.NotZero(t, a.ID)
	evs := b.events(t)
	require.Len(t, evs, 2)
	require.Equal(t, a.EventID, evs[0].EventID)
	require.Equal(t, map[string]string{"tenant": "t1"}, evs[0].Metadata)
	require.JSONEq(t, `{"sku":7}`, string(evs[0].Payload))
	require.Equal(t, "low", evs[1].Queue)
	require.JSONEq(t, `null`, string(evs[1].Payload))

	require.NoError(t, b.ob.Record(ctx, b.db), "no events is a no-op")
	require.ErrorContains(t, b.ob.Record(ctx, nil, a), "db must not be nil")
}

func TestRecordRollsBackWithTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ev, err := model.NewEvent("x", nil)
	require.NoError(t, err)
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := b.ob.Record(ctx, tx, ev); err != nil {
			return err
		}
		return errBusiness
	})
	require.ErrorIs(t, err, errBusiness)
	require.Empty(t, b.events(t))
}

// TestBadInput checks that every kind of bad input fails the business transaction with an error that
// names what is wrong, and leaves the database as it was.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// handler returns the events (or error) of one case for every inserted order.
	type badCase struct {
		name    string
		events  func(t *testing.T) ([]*model.Event, error)
		wantErr string
		wantIs  error
	}
	valid := func(t *testing.T) *model.Event {
		ev, err := model.NewEvent("ok", nil)
		require.NoError(t, err)
		return ev
	}
	dupID := uuid.Must(uuid.NewV7())
	cases := []badCase{
		{"EmptyName", func(*testing.T) ([]*model.Event, error) {
			return []*model.Event{{EventID: uuid.New(), Payload: []byte("{}")}}, nil
		}, "Name must not be empty", model.ErrInvalidEvent},
		{"OverlongName", func(*testing.T) ([]*model.Event, error) {
			return []*model.Event{{EventID: uuid.New(), Name: strings.Repeat("n", 256), Payload: []byte("{}")}}, nil
		}, "over the limit of 255", model.ErrInvalidEvent},
		{"ChannelPayload", func(*testing.T) ([]*model.Event, error) {
			_, err := model.NewEvent("bad", make(chan int))
			return nil, err
		}, "unsupported type: chan int", model.ErrInvalidEvent},
		{"NaNPayload", func(*testing.T) ([]*model.Event, error) {
			_, err := model.NewEvent("bad", math.NaN())
			return nil, err
		}, "unsupported value: NaN", model.ErrInvalidEvent},
		{"PayloadOverOutboxLimit", func(*testing.T) ([]*model.Event, error) {
			ev, err := model.NewEvent("big", strings.Repeat("x", 2048))
			return []*model.Event{ev}, err
		}, "over the limit of 1024", model.ErrInvalidEvent},
		{"PayloadNUL", func(*testing.T) ([]*model.Event, error) {
			return []*model.Event{{EventID: uuid.New(), Name: "raw", Payload: []byte(`"\u0000"`)}}, nil
		}, `Payload contains \u0000`, model.ErrInvalidEvent},
		{"TooManyMetadataKeys", func(*testing.T) ([]*model.Event, error) {
			md := map[string]string{}
			for i := range wire.MaxMetadataCount + 1 {
				md[strings.Repeat("k", i+1)] = "v"
			}
			return []*model.Event{{EventID: uuid.New(), Name: "md", Payload: []byte("{}"), Metadata: md}}, nil
		}, "over the limit of 32 (MaxMetadataCount)", model.ErrInvalidEvent},
		{"MetadataValueTooLong", func(*testing.T) ([]*model.Event, error) {
			md := map[string]string{"k": strings.Repeat("v", wire.MaxMetadataValueLength+1)}
			return []*model.Event{{EventID: uuid.New(), Name: "md", Payload: []byte("{}"), Metadata: md}}, nil
		}, "(MaxMetadataValueLength)", model.ErrInvalidEvent},
		{"InvalidRawJSON", func(*testing.T) ([]*model.Event, error) {
			return []*model.Event{{EventID: uuid.New(), Name: "raw", Payload: []byte("{oops")}}, nil
		}, "Payload is not valid JSON", model.ErrInvalidEvent},
		{"NilEvent", func(t *testing.T) ([]*model.Event, error) {
			return []*model.Event{valid(t), nil}, nil
		}, "nil event", nil},
		{"DuplicateIDInOneCall", func(t *testing.T) ([]*model.Event, error) {
			a, c := valid(t), valid(t)
			c.EventID = a.EventID
			return []*model.Event{a, c}, nil
		}, "duplicate event id", bunx.ErrDuplicateEvent},
		{"HandlerError", func(*testing.T) ([]*model.Event, error) {
			return nil, errBusiness
		}, "business rule failed", errBusiness},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, bunx.WithMaxPayloadSize(1024))
			db, ob := b.db, b.ob
			bunx.OnInsert(ob, func(context.Context, *Order) ([]*model.Event, error) { return tc.events(t) })
			err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.NewInsert().Model(&Order{Ref: "r"}).Exec(ctx)
				return err
			})
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, "bunx.OnInsert[bunx_test.Order]", "the error names the hook and the model")
			if tc.wantIs != nil {
				require.ErrorIs(t, err, tc.wantIs)
			}
			b.requireUnchanged(t)
		})
	}

	t.Run("DuplicateIDAlreadyInTheOutbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := model.NewEvent("once", nil, model.WithEventID(dupID))
		require.NoError(t, err)
		require.NoError(t, b.ob.Record(ctx, b.db, first))

		again, err := model.NewEvent("once", nil, model.WithEventID(dupID))
		require.NoError(t, err)
		err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&Order{Ref: "r"}).Exec(ctx); err != nil {
				return err
			}
			return b.ob.Record(ctx, tx, again)
		})
		require.ErrorIs(t, err, bunx.ErrDuplicateEvent)
		require.ErrorContains(t, err, dupID.String(), "the error says which id")
		require.Zero(t, b.orders(t))
		require.Len(t, b.events(t), 1)
	})

	t.Run("NilModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var orders []Order
			_, err := tx.NewInsert().Model(&orders).Exec(ctx)
			return err
		})
		require.Error(t, err)
		b.requireUnchanged(t)
	})

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.ExecContext(ctx, "DROP TABLE outbox_events")
		require.NoError(t, err)
		ev, err := model.NewEvent("x", nil)
		require.NoError(t, err)
		err = b.ob.Record(ctx, b.db, ev)
		require.ErrorContains(t, err, "the outbox table is missing: apply the migrations")
	})
}

func TestDispatcherJoinsTheTransactionInContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	txr := bunx.NewTransactor(b.db, bunx.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelReadCommitted}))

	// placeOrder is service code: it knows a Dispatcher and a transactor, not the outbox.
	placeOrder := func(ctx context.Context, d bunx.Dispatcher, ref string, fail bool) error {
		return txr.WithinTransaction(ctx, func(ctx context.Context) error {
			if _, err := bunx.TxOrDB(ctx, b.db).NewInsert().Model(&Order{Ref: ref}).Exec(ctx); err != nil {
				return err
			}
			ev, err := model.NewEvent("order.audit", map[string]string{"ref": ref})
			if err != nil {
				return err
			}
			if err := d.Dispatch(ctx, ev); err != nil {
				return err
			}
			if fail {
				return errBusiness
			}
			return nil
		})
	}

	require.NoError(t, placeOrder(ctx, b.ob, "ok", false))
	require.ErrorIs(t, placeOrder(ctx, b.ob, "fails", true), errBusiness)
	require.Equal(t, []string{"order.placed", "order.audit"}, b.eventNames(t), "the failed call left nothing")

	// Nested: the inner call runs in a savepoint and rolls back alone.
	require.NoError(t, txr.WithinTransaction(ctx, func(ctx context.Context) error {
		require.ErrorIs(t, placeOrder(ctx, b.ob, "inner", true), errBusiness)
		return placeOrder(ctx, b.ob, "outer", false)
	}))
	require.EqualValues(t, 2, b.orders(t))

	// Outside a transaction Dispatch is a plain insert.
	ev, err := model.NewEvent("standalone", nil)
	require.NoError(t, err)
	require.NoError(t, b.ob.Dispatch(ctx, ev))
	require.Len(t, b.events(t), 5)

	var fake fakeDispatcher
	require.NoError(t, placeOrder(ctx, &fake, "faked", false))
	require.Len(t, fake.events, 1, "service tests can pass a fake")
}

type fakeDispatcher struct{ events []*model.Event }

func (f *fakeDispatcher) Dispatch(_ context.Context, evs ...*model.Event) error {
	f.events = append(f.events, evs...)
	return nil
}

func TestRecordCarriesTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	ev, err := model.NewEvent("traced", nil)
	require.NoError(t, err)
	require.NoError(t, b.ob.Record(ctx, b.db, ev))
	require.Equal(t, "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", b.events(t)[0].Metadata[wire.HeaderTraceParent])
}

func TestTransactorWithoutDB(t *testing.T) {
	t.Parallel()
	var txr *bunx.Transactor
	err := txr.WithinTransaction(context.Background(), func(context.Context) error { return nil })
	require.Error(t, err)
	require.False(t, errors.Is(err, errBusiness))
}
