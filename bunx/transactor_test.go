package bunx_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// Shipment is a business model with no hooks: its service dispatches its events.
type Shipment struct {
	bun.BaseModel `bun:"table:shipments"`
	ID            int64  `bun:",pk,autoincrement"`
	Ref           string `bun:",notnull"`
}

// shipmentRepo is a repository; joins says whether it writes the way TxOrDB's documentation says.
type shipmentRepo struct {
	db    *bun.DB
	joins bool
}

func (r *shipmentRepo) Insert(ctx context.Context, s *Shipment) error {
	idb := bun.IDB(r.db) // the wrong way: the repository's own *bun.DB
	if r.joins {
		idb = bunx.TxOrDB(ctx, r.db)
	}
	_, err := idb.NewInsert().Model(s).Exec(ctx)
	return err
}

// shipmentService is service code that knows neither bun.Tx nor the outbox.
type shipmentService struct {
	tx        bunx.TxRunner
	events    bunx.Dispatcher
	shipments *shipmentRepo
}

func (s *shipmentService) Ship(ctx context.Context, ref string, after func() error) error {
	return s.tx.WithinTransaction(ctx, func(ctx context.Context) error {
		if err := s.shipments.Insert(ctx, &Shipment{Ref: ref}); err != nil {
			return err
		}
		ev, err := model.NewEvent("shipment.created", map[string]string{"ref": ref})
		if err != nil {
			return err
		}
		if err := s.events.Dispatch(ctx, ev); err != nil {
			return err
		}
		return after()
	})
}

func setupShipments(t *testing.T, joins bool, opts ...bunx.Option) (*shipmentService, *bun.DB) {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	_, err := db.NewCreateTable().Model((*Shipment)(nil)).Exec(context.Background())
	require.NoError(t, err)
	return &shipmentService{
		tx:        bunx.NewTransactor(db),
		events:    bunx.New(db, opts...),
		shipments: &shipmentRepo{db: db, joins: joins},
	}, db
}

func counts(t *testing.T, db *bun.DB) (shipments, events int64) {
	t.Helper()
	return outboxtest.Count(t, db, "shipments", ""), outboxtest.Count(t, db, "outbox_events", "")
}

// TestTransactorRepositoryWithTxOrDBJoins: a repository that writes with TxOrDB inside WithinTransaction
// commits and rolls back with the events Dispatch wrote.
func TestTransactorRepositoryWithTxOrDBJoins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, db := setupShipments(t, true)

	require.ErrorIs(t, svc.Ship(ctx, "rolled-back", func() error { return errBusiness }), errBusiness)
	s, e := counts(t, db)
	require.Zero(t, s, "the shipment rolled back")
	require.Zero(t, e, "its event rolled back")

	require.NoError(t, svc.Ship(ctx, "kept", func() error { return nil }))
	s, e = counts(t, db)
	require.EqualValues(t, 1, s)
	require.EqualValues(t, 1, e)
}

// TestTransactorRepositoryWithItsOwnDBDoesNotJoin shows the trap TxOrDB's documentation warns of: a
// repository that writes with its own *bun.DB inside WithinTransaction commits its change at once, and the
// change stays when the transaction rolls back the event. This is the split an outbox exists to prevent,
// kept here as a test so the documentation stays true.
func TestTransactorRepositoryWithItsOwnDBDoesNotJoin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, db := setupShipments(t, false)

	require.ErrorIs(t, svc.Ship(ctx, "split", func() error { return errBusiness }), errBusiness)
	s, e := counts(t, db)
	require.EqualValues(t, 1, s, "the shipment committed outside the transaction")
	require.Zero(t, e, "while its event rolled back with it")
}

// TestStrictDispatch: WithStrictDispatch refuses Dispatch outside a transaction; the default writes it.
func TestStrictDispatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Strict", func(t *testing.T) {
		t.Parallel()
		svc, db := setupShipments(t, true, bunx.WithStrictDispatch())
		ev, err := model.NewEvent("shipment.created", nil)
		require.NoError(t, err)
		require.ErrorIs(t, svc.events.Dispatch(ctx, ev), bunx.ErrNoTransaction)
		_, e := counts(t, db)
		require.Zero(t, e, "nothing written")

		require.NoError(t, svc.Ship(ctx, "in-tx", func() error { return nil }), "inside WithinTransaction it works")
		_, e = counts(t, db)
		require.EqualValues(t, 1, e)
	})

	t.Run("Default", func(t *testing.T) {
		t.Parallel()
		svc, db := setupShipments(t, true)
		ev, err := model.NewEvent("shipment.created", nil)
		require.NoError(t, err)
		require.NoError(t, svc.events.Dispatch(ctx, ev), "a plain insert outside a transaction")
		_, e := counts(t, db)
		require.EqualValues(t, 1, e)
	})
}

// fakeTx is a TxRunner for unit tests of service code: no database.
type fakeTx struct{ runs int }

func (f *fakeTx) WithinTransaction(ctx context.Context, fn func(ctx context.Context) error) error {
	f.runs++
	return fn(ctx)
}

// fakeEvents is a Dispatcher for unit tests of service code.
type fakeEvents struct{ names []string }

func (f *fakeEvents) Dispatch(_ context.Context, events ...*model.Event) error {
	for _, ev := range events {
		f.names = append(f.names, ev.Name)
	}
	return nil
}

// TestServiceWithFakes: service code that takes a TxRunner and a Dispatcher runs with fakes of both.
func TestServiceWithFakes(t *testing.T) {
	t.Parallel()
	txr, events := &fakeTx{}, &fakeEvents{}
	svc := &shipmentService{tx: txr, events: events}
	err := svc.tx.WithinTransaction(context.Background(), func(ctx context.Context) error {
		ev, err := model.NewEvent("shipment.created", nil)
		if err != nil {
			return err
		}
		return svc.events.Dispatch(ctx, ev)
	})
	require.NoError(t, err)
	require.Equal(t, 1, txr.runs)
	require.Equal(t, []string{"shipment.created"}, events.names)
}
