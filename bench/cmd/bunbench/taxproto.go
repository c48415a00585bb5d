package main

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
)

// The write side of issue 18's prototypes: the business transaction with its events written by hand into
// each design's own table, the same literal INSERT as the "hand-written INSERT" arm (one statement per
// business statement), so that the ratios to "no event" show what each table costs a writer.
func protoTaxArms(ctx context.Context, schema func(bool) (*bun.DB, error),
	run func(*bun.DB, func(context.Context, bun.Tx, bool) error) func(context.Context, bool) error,
) ([]taxArm, error) {
	designs := []struct {
		name, note, table string
		ddl               []string
	}{
		{"lean outbox INSERT", "INSERT INTO lean_outbox (event_id, payload): the lean naive relay's table (one partial index)", "lean_outbox", leanTable},
		{"(a) snapshot outbox INSERT", "INSERT INTO snap_outbox (event_id, payload): txid xid8 DEFAULT pg_current_xact_id(), one index (txid, id)", "snap_outbox", snapTables[:2]},
		{"(b) pending-only outbox INSERT", "INSERT INTO dl_outbox (event_id, payload): the DELETE design's table (primary key on id)", "dl_outbox", dlTables[:1]},
	}
	var arms []taxArm
	for _, d := range designs {
		db, err := schema(false)
		if err != nil {
			return nil, err
		}
		if err := execAll(ctx, db, d.ddl...); err != nil {
			return nil, err
		}
		arms = append(arms, taxArm{d.name, d.note, run(db, func(ctx context.Context, tx bun.Tx, lines bool) error {
			return insertOrder(ctx, tx, lines, func(names []string, payloads []any) error {
				var q strings.Builder
				q.WriteString("INSERT INTO " + d.table + " (event_id, payload) VALUES ")
				args := make([]any, 0, 2*len(names))
				for i := range names {
					data, err := json.Marshal(payloads[i])
					if err != nil {
						return err
					}
					if i > 0 {
						q.WriteString(", ")
					}
					q.WriteString("(?, ?)")
					args = append(args, uuid.Must(uuid.NewV7()).String(), string(data))
				}
				_, err := tx.ExecContext(ctx, q.String(), args...)
				return err
			})
		})})
	}
	return arms, nil
}
