package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
)

// The business transaction of the tax part: insert one order, and in the "order + 5 lines" shape also its
// five lines in one statement. Each row inserted emits one event (1 or 6 per transaction).

type order struct {
	bun.BaseModel `bun:"table:orders"`

	ID     int64  `bun:",pk,autoincrement"`
	Ref    string `bun:",notnull,unique"`
	Status string `bun:",notnull,default:'new'"`
}

type line struct {
	bun.BaseModel `bun:"table:order_lines"`

	ID      int64  `bun:",pk,autoincrement"`
	OrderID int64  `bun:",notnull"`
	SKU     string `bun:"sku,notnull"`
	Qty     int    `bun:",notnull"`
}

// hookOrder and hookLine are the same rows with bunx's hooks.
type hookOrder struct {
	bun.BaseModel `bun:"table:orders"`
	bunx.Hooks    `bun:"-"`

	ID     int64  `bun:",pk,autoincrement"`
	Ref    string `bun:",notnull,unique"`
	Status string `bun:",notnull,default:'new'"`
}

type hookLine struct {
	bun.BaseModel `bun:"table:order_lines"`
	bunx.Hooks    `bun:"-"`

	ID      int64  `bun:",pk,autoincrement"`
	OrderID int64  `bun:",notnull"`
	SKU     string `bun:"sku,notnull"`
	Qty     int    `bun:",notnull"`
}

type orderPlaced struct {
	OrderID int64  `json:"order_id"`
	Ref     string `json:"ref"`
}

type lineAdded struct {
	OrderID int64  `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
}

func (orderPlaced) Kind() string { return "order.placed" }
func (lineAdded) Kind() string   { return "line.added" }

// taxArm is one way to write the business transaction; tx runs it once.
type taxArm struct {
	name string
	note string
	tx   func(ctx context.Context, lines bool) error
}

var refs atomic.Int64

func nextRef() string { return fmt.Sprintf("r%d", refs.Add(1)) }

func newLines(orderID int64) []line {
	ls := make([]line, 5)
	for i := range ls {
		ls[i] = line{OrderID: orderID, SKU: fmt.Sprintf("sku-%d", i), Qty: i + 1}
	}
	return ls
}

// insertOrder inserts the plain order (and lines) with bun and calls emit after each statement with the
// payloads of the rows it wrote.
func insertOrder(ctx context.Context, tx bun.Tx, lines bool, emit func(names []string, payloads []any) error) error {
	o := &order{Ref: nextRef()}
	if _, err := tx.NewInsert().Model(o).Exec(ctx); err != nil {
		return err
	}
	if emit != nil {
		if err := emit([]string{"order.placed"}, []any{orderPlaced{OrderID: o.ID, Ref: o.Ref}}); err != nil {
			return err
		}
	}
	if !lines {
		return nil
	}
	ls := newLines(o.ID)
	if _, err := tx.NewInsert().Model(&ls).Exec(ctx); err != nil {
		return err
	}
	if emit == nil {
		return nil
	}
	names, payloads := make([]string, len(ls)), make([]any, len(ls))
	for i, l := range ls {
		names[i], payloads[i] = "line.added", lineAdded{OrderID: l.OrderID, SKU: l.SKU, Qty: l.Qty}
	}
	return emit(names, payloads)
}

// hookTx registers bunx.OnInsert handlers for the hook models on an Outbox bound to db, and returns the
// business transaction that inserts them.
func hookTx(db *bun.DB, opts ...bunx.Option) func(context.Context, bool) error {
	ob := bunx.New(db, opts...)
	bunx.OnInsert(ob, func(_ context.Context, o *hookOrder) ([]*model.Event, error) {
		ev, err := model.NewEvent("order.placed", orderPlaced{OrderID: o.ID, Ref: o.Ref})
		return []*model.Event{ev}, err
	})
	bunx.OnInsert(ob, func(_ context.Context, l *hookLine) ([]*model.Event, error) {
		ev, err := model.NewEvent("line.added", lineAdded{OrderID: l.OrderID, SKU: l.SKU, Qty: l.Qty})
		return []*model.Event{ev}, err
	})
	return func(ctx context.Context, lines bool) error {
		return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			o := &hookOrder{Ref: nextRef()}
			if _, err := tx.NewInsert().Model(o).Exec(ctx); err != nil {
				return err
			}
			if !lines {
				return nil
			}
			ls := make([]hookLine, 5)
			for i := range ls {
				ls[i] = hookLine{OrderID: o.ID, SKU: fmt.Sprintf("sku-%d", i), Qty: i + 1}
			}
			_, err := tx.NewInsert().Model(&ls).Exec(ctx)
			return err
		})
	}
}

func createTables(ctx context.Context, db *bun.DB) error {
	for _, m := range []any{(*order)(nil), (*line)(nil)} {
		if _, err := db.NewCreateTable().Model(m).Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

func taxArms(ctx context.Context, e *env, conns int, designs, indexes bool) ([]taxArm, error) {
	var arms []taxArm
	schema := func(migrated bool) (*bun.DB, error) {
		db, _, err := e.schema(ctx, conns, migrated)
		if err != nil {
			return nil, err
		}
		return db, createTables(ctx, db)
	}
	run := func(db *bun.DB, body func(ctx context.Context, tx bun.Tx, lines bool) error) func(context.Context, bool) error {
		return func(ctx context.Context, lines bool) error {
			return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return body(ctx, tx, lines) })
		}
	}

	// No event: bunbox's schema, no Outbox bound.
	none, err := schema(true)
	if err != nil {
		return nil, err
	}
	arms = append(arms, taxArm{"no event", "the baseline", run(none, func(ctx context.Context, tx bun.Tx, lines bool) error {
		return insertOrder(ctx, tx, lines, nil)
	})})

	// bunbox hook and bunbox Record, each with the default literal INSERT and with the prepared one
	// (bunx.WithPreparedStatements, the default until the pooler fix), side by side in the same rounds.
	for _, v := range []struct {
		suffix, desc string
		opts         []bunx.Option
	}{
		{"", "", nil},
		{", prepared", " (bunx.WithPreparedStatements)", []bunx.Option{bunx.WithPreparedStatements()}},
	} {
		// bunbox hook: OnInsert handlers on the hook models.
		hookDB, err := schema(true)
		if err != nil {
			return nil, err
		}
		arms = append(arms, taxArm{"bunbox hook" + v.suffix, "bunx.OnInsert on the models" + v.desc, hookTx(hookDB, v.opts...)})

		// bunbox Record: the events built with model.NewEvent and written with Outbox.Record.
		recDB, err := schema(true)
		if err != nil {
			return nil, err
		}
		rec := bunx.New(recDB, v.opts...)
		arms = append(arms, taxArm{"bunbox Record" + v.suffix, "Outbox.Record after each insert (the stream on, as the migrations leave it)" + v.desc, run(recDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
			return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
				evs := make([]*model.Event, len(names))
				for i := range names {
					ev, err := model.NewEvent(names[i], payloads[i])
					if err != nil {
						return err
					}
					evs[i] = ev
				}
				return rec.Record(ctx, tx, evs...)
			})
		})})
	}

	// bunbox Record on the per-row path (relay.DisableStream): the same INSERT, whose rows are pending rows
	// (published_at NULL, no xid), so that they go into the three partial indexes of pending rows rather than
	// the stream's index, as the arms above (the stream, the default) do.
	perRowDB, err := schema(true)
	if err != nil {
		return nil, err
	}
	if err := disableStream(ctx, perRowDB); err != nil {
		return nil, err
	}
	perRowRec := bunx.New(perRowDB)
	arms = append(arms, taxArm{"bunbox Record, per-row", "Outbox.Record after each insert, on an outbox where relay.DisableStream was called (the per-row path)", run(perRowDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
		return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
			evs := make([]*model.Event, len(names))
			for i := range names {
				ev, err := model.NewEvent(names[i], payloads[i])
				if err != nil {
					return err
				}
				evs[i] = ev
			}
			return perRowRec.Record(ctx, tx, evs...)
		})
	})})

	// The single-statement limit: the events travel in the business row's own INSERT as a data-modifying
	// CTE (bun's InsertQuery.With with an insert of model.Event), so the transaction has no extra round
	// trip. The order's event carries only its application-assigned ref: the id is not known before the
	// statement runs.
	cteDB, err := schema(true)
	if err != nil {
		return nil, err
	}
	arms = append(arms, taxArm{"event in the business INSERT (CTE)", "tx.NewInsert().Model(order).With(\"outbox\", tx.NewInsert().Model(&events)): no extra statement", run(cteDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
		o := &order{Ref: nextRef()}
		ev, err := model.NewEvent("order.placed", orderPlaced{Ref: o.Ref})
		if err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(o).With("outbox", tx.NewInsert().Model(ev)).Exec(ctx); err != nil {
			return err
		}
		if !lines {
			return nil
		}
		ls := newLines(o.ID)
		evs := make([]*model.Event, len(ls))
		for i, l := range ls {
			if evs[i], err = model.NewEvent("line.added", lineAdded{OrderID: l.OrderID, SKU: l.SKU, Qty: l.Qty}); err != nil {
				return err
			}
		}
		_, err = tx.NewInsert().Model(&ls).With("outbox", tx.NewInsert().Model(&evs)).Exec(ctx)
		return err
	})})

	// Hand-written: the INSERT a user would write into bunbox's table, the same columns bunbox writes.
	handDB, err := schema(true)
	if err != nil {
		return nil, err
	}
	arms = append(arms, taxArm{"hand-written INSERT", "tx.ExecContext(INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata) VALUES ...)", run(handDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
		return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
			var q strings.Builder
			q.WriteString("INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata) VALUES ")
			args := make([]any, 0, 5*len(names))
			for i := range names {
				data, err := json.Marshal(payloads[i])
				if err != nil {
					return err
				}
				if i > 0 {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?, ?, ?, '{}')")
				args = append(args, uuid.Must(uuid.NewV7()).String(), names[i], "default", string(data))
			}
			_, err := tx.ExecContext(ctx, q.String(), args...)
			return err
		})
	})})

	// Hand-written and prepared: the same INSERT as a statement prepared once on the pool (one per count of
	// rows) and run on the transaction with tx.StmtContext, which is what bunbox does under the hood.
	hpDB, err := schema(true)
	if err != nil {
		return nil, err
	}
	hpStmts := map[int]*sql.Stmt{}
	for _, n := range []int{1, 5} {
		var q strings.Builder
		q.WriteString("INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata) VALUES ")
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, '{}')", 4*i+1, 4*i+2, 4*i+3, 4*i+4)
		}
		if hpStmts[n], err = hpDB.DB.PrepareContext(ctx, q.String()); err != nil {
			return nil, err
		}
	}
	arms = append(arms, taxArm{"hand-written INSERT, prepared", "the same INSERT prepared once (db.PrepareContext) and run with tx.StmtContext(stmt).ExecContext", run(hpDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
		return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
			args := make([]any, 0, 4*len(names))
			for i := range names {
				data, err := json.Marshal(payloads[i])
				if err != nil {
					return err
				}
				args = append(args, uuid.Must(uuid.NewV7()).String(), names[i], "default", string(data))
			}
			st := tx.Tx.StmtContext(ctx, hpStmts[len(names)])
			defer st.Close()
			_, err := st.ExecContext(ctx, args...)
			return err
		})
	})})

	// The hook on copies of bunbox's table without some of its indexes: what each costs the writer. Only
	// when -arms names them ("without"), never in make bench: such a table cannot serve a relay.
	if indexes {
		idxArms, err := indexTaxArms(ctx, schema)
		if err != nil {
			return nil, err
		}
		arms = append(arms, idxArms...)
	}

	// Issue 18's designs of the outbox table, written by hand (not in a -quick run unless -arms names them).
	if designs {
		protoArms, err := protoTaxArms(ctx, schema, run)
		if err != nil {
			return nil, err
		}
		arms = append(arms, protoArms...)
	}

	// Watermill: its SQL publisher on the business transaction.
	wmDB, err := schema(false)
	if err != nil {
		return nil, err
	}
	wmSchema := textArgs{}
	logger := watermill.NopLogger{}
	init, err := wmsql.NewPublisher(wmsql.BeginnerFromStdSQL(wmDB.DB), wmsql.PublisherConfig{SchemaAdapter: wmSchema, AutoInitializeSchema: true}, logger)
	if err != nil {
		return nil, err
	}
	for _, topic := range []string{"order_placed", "line_added"} { // creates the topics' tables
		if err := init.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("{}"))); err != nil {
			return nil, err
		}
	}
	arms = append(arms, taxArm{"Watermill SQL publisher", "watermill-sql v4 NewPublisher(TxFromStdSQL(tx)), one Publish per statement", run(wmDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
		pub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx.Tx), wmsql.PublisherConfig{SchemaAdapter: wmSchema}, logger)
		if err != nil {
			return err
		}
		return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
			msgs := make([]*message.Message, len(names))
			for i := range names {
				data, err := json.Marshal(payloads[i])
				if err != nil {
					return err
				}
				msgs[i] = message.NewMessage(watermill.NewUUID(), data)
			}
			return pub.Publish(strings.ReplaceAll(names[0], ".", "_"), msgs...)
		})
	})})

	// River: InsertTx / InsertManyTx on the business transaction, with its database/sql driver so that
	// it shares bun's connection pool and driver.
	rvDB, err := schema(false)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverdatabasesql.New(rvDB.DB), nil)
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	rv, err := river.NewClient(riverdatabasesql.New(rvDB.DB), &river.Config{})
	if err != nil {
		return nil, err
	}
	arms = append(arms, taxArm{"River InsertTx", "river v0.51 InsertTx/InsertManyTx, riverdatabasesql driver", run(rvDB, func(ctx context.Context, tx bun.Tx, lines bool) error {
		return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
			if len(payloads) == 1 {
				_, err := rv.InsertTx(ctx, tx.Tx, payloads[0].(river.JobArgs), nil)
				return err
			}
			params := make([]river.InsertManyParams, len(payloads))
			for i, p := range payloads {
				params[i] = river.InsertManyParams{Args: p.(river.JobArgs)}
			}
			_, err := rv.InsertManyTx(ctx, tx.Tx, params)
			return err
		})
	})})
	return arms, nil
}

// runTax measures transactions per second of each arm, 1 and 8 writers, both shapes, and the ratio of each
// to "no event" in the same round.
func runTax(ctx context.Context, e *env, o options) error {
	fmt.Println("## Tax: the business transaction with its events, as a ratio to no event")
	fmt.Println()
	arms, err := taxArms(ctx, e, 10, !o.quick || o.arms != "", o.arms != "" && o.want("bunbox hook without"))
	if err != nil {
		return err
	}
	type key struct {
		arm     string
		lines   bool
		writers int
	}
	tps := map[key][]float64{}
	ratio := map[key][]float64{}
	for r := range o.rounds {
		for _, lines := range []bool{false, true} {
			for _, writers := range []int{1, 8} {
				var picked []taxArm
				for _, a := range arms {
					if a.name == "no event" || o.want(a.name) {
						picked = append(picked, a)
					}
				}
				fns := make([]func(context.Context) error, len(picked))
				for i, a := range picked {
					fns[i] = func(ctx context.Context) error { return a.tx(ctx, lines) }
				}
				rates, err := interleave(ctx, writers, o.dur*time.Duration(len(picked)), r, fns)
				if err != nil {
					return err
				}
				got := map[string]float64{}
				for i, a := range picked {
					got[a.name] = rates[i]
				}
				for name, n := range got {
					k := key{name, lines, writers}
					tps[k] = append(tps[k], n)
					ratio[k] = append(ratio[k], n/got["no event"])
				}
			}
		}
	}
	var rows [][]string
	for _, a := range arms {
		if _, ok := tps[key{a.name, false, 1}]; !ok {
			continue
		}
		row := []string{a.name}
		for _, lines := range []bool{false, true} {
			for _, writers := range []int{1, 8} {
				k := key{a.name, lines, writers}
				row = append(row, fmt.Sprintf("%.0f", median(tps[k])), fmt.Sprintf("**%.2f** (%s)", median(ratio[k]), spread(ratio[k])))
			}
		}
		rows = append(rows, row)
	}
	table([]string{"arm", "order, 1 writer tx/s", "ratio", "order, 8 writers tx/s", "ratio",
		"order + 5 lines, 1 writer tx/s", "ratio", "order + 5 lines, 8 writers tx/s", "ratio"}, rows)
	fmt.Printf("\nMedians of %d rounds of %s per arm, the arms taken in turn one transaction at a time by each writer; ratios to \"no event\" in the same round (min–max in brackets).\n", o.rounds, o.dur)
	for _, a := range arms {
		if a.name == "no event" || o.want(a.name) {
			fmt.Printf("- %s: %s\n", a.name, a.note)
		}
	}
	return nil
}

// interleave runs the arms fns from writers goroutines for d, each goroutine taking the arms in turn one
// transaction at a time (starting at a different arm), so that every arm sees the same machine, and
// returns each arm's transactions per second: its transactions over the time the writers spent in it.
func interleave(ctx context.Context, writers int, d time.Duration, round int, fns []func(context.Context) error) ([]float64, error) {
	type tally struct {
		n  int64
		ns int64
	}
	tallies := make([][]tally, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for w := range writers {
		tallies[w] = make([]tally, len(fns))
		wg.Go(func() {
			for i := w + round; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				a := i % len(fns)
				start := time.Now()
				if err := fns[a](ctx); err != nil {
					errs[w] = err
					return
				}
				tallies[w][a].n++
				tallies[w][a].ns += int64(time.Since(start))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rates := make([]float64, len(fns))
	for a := range fns {
		var n, ns int64
		for w := range writers {
			n, ns = n+tallies[w][a].n, ns+tallies[w][a].ns
		}
		if ns > 0 { // the writers spent ns/writers of wall time each in arm a
			rates[a] = float64(n) / (time.Duration(ns).Seconds() / float64(writers))
		}
	}
	return rates, ctx.Err()
}

// textArgs is watermill-sql's PostgreSQL schema with its []byte arguments passed as text: pgdriver sends a
// []byte as bytea, where lib/pq and pgx let the server read it as the json the columns hold. The SQL is
// Watermill's own.
type textArgs struct{ wmsql.DefaultPostgreSQLSchema }

func (s textArgs) InsertQuery(params wmsql.InsertQueryParams) (wmsql.Query, error) {
	q, err := s.DefaultPostgreSQLSchema.InsertQuery(params)
	for i, a := range q.Args {
		if b, ok := a.([]byte); ok {
			q.Args[i] = string(b)
		}
	}
	return q, err
}
