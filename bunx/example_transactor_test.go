package bunx_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
)

// Parcel is a business model of the repository example.
type Parcel struct {
	bun.BaseModel `bun:"table:example_parcels"`
	ID            int64  `bun:",pk,autoincrement"`
	Dest          string `bun:",notnull"`
}

// ParcelRepo writes with bunx.TxOrDB, so its writes join the transaction of WithinTransaction. Writing
// with r.db.NewInsert() instead would commit the parcel at once, and keep it when the transaction rolls
// back the event.
type ParcelRepo struct{ db *bun.DB }

func (r *ParcelRepo) Insert(ctx context.Context, p *Parcel) error {
	_, err := bunx.TxOrDB(ctx, r.db).NewInsert().Model(p).Exec(ctx)
	return err
}

// ParcelService knows neither bun.Tx nor the outbox: it takes a TxRunner (a fake in its unit tests), a
// Dispatcher and its repository.
type ParcelService struct {
	Tx      bunx.TxRunner
	Events  bunx.Dispatcher
	Parcels *ParcelRepo
}

func (s *ParcelService) Send(ctx context.Context, dest string) error {
	return s.Tx.WithinTransaction(ctx, func(ctx context.Context) error {
		p := &Parcel{Dest: dest}
		if err := s.Parcels.Insert(ctx, p); err != nil {
			return err
		}
		ev, err := model.NewEvent("parcel.sent", map[string]any{"parcel_id": p.ID, "dest": dest})
		if err != nil {
			return err
		}
		if err := s.Events.Dispatch(ctx, ev); err != nil {
			return err
		}
		if dest == "nowhere" {
			return errors.New("no route") // rolls back the parcel and its event together
		}
		return nil
	})
}

// A service, its repository and the outbox share the transaction of WithinTransaction: the repository
// writes with bunx.TxOrDB, Dispatch joins by itself, and WithStrictDispatch refuses a Dispatch that runs
// outside any transaction.
func Example_repository() {
	ctx := context.Background()
	db := exampleDB(ctx) // your database
	defer db.Close()
	if _, err := db.NewCreateTable().Model((*Parcel)(nil)).IfNotExists().Exec(ctx); err != nil {
		panic(err)
	}
	ob := bunx.New(db, bunx.WithStrictDispatch())
	svc := &ParcelService{Tx: bunx.NewTransactor(db), Events: ob, Parcels: &ParcelRepo{db: db}}

	fmt.Println("sent:", svc.Send(ctx, "lisbon"))
	fmt.Println("not sent:", svc.Send(ctx, "nowhere"))
	ev, _ := model.NewEvent("parcel.lost", nil)
	fmt.Println("outside a transaction:", errors.Is(ob.Dispatch(ctx, ev), bunx.ErrNoTransaction))

	parcels, _ := db.NewSelect().Model((*Parcel)(nil)).Count(ctx)
	events, _ := db.NewSelect().Table("outbox_events").Where("event_name LIKE 'parcel.%'").Count(ctx)
	fmt.Println("parcels:", parcels, "events:", events)
	// Output:
	// sent: <nil>
	// not sent: no route
	// outside a transaction: true
	// parcels: 1 events: 1
}
