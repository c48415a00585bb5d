package bunx

import (
	"database/sql"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/model"
)

// BenchmarkInsertStatement builds the statement that writes one event and six events, with bun's model
// insert (what bunx used before) and with insertSQL; no server is needed:
//
//	go test -run '^$' -bench InsertStatement -benchmem ./bunx/
func BenchmarkInsertStatement(b *testing.B) {
	sqldb := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN("postgres://localhost:1/none")))
	db := bun.NewDB(sqldb, pgdialect.New())
	defer db.Close()
	for _, n := range []int{1, 6} {
		events := make([]*model.Event, n)
		for i := range events {
			ev, err := model.NewEvent("order.placed", map[string]any{"order_id": 12345, "ref": "A-1"})
			if err != nil {
				b.Fatal(err)
			}
			events[i] = ev
		}
		name := map[int]string{1: "1event", 6: "6events"}[n]
		b.Run("bun_model_insert/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.NewInsert().Model(&events).AppendQuery(db.QueryGen(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("insertSQL/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := insertSQL(db.Dialect(), "outbox_events", events, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
