package bunx

import (
	"reflect"
	"slices"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/model"
)

// columnsLeftToDefaults are the columns of model.Event that the insert does not write: PostgreSQL fills
// them (id, created_at) or the relay does.
var columnsLeftToDefaults = []string{"id", "created_at", "published_at", "attempts", "next_attempt_at", "last_error", "dead_at", "completed_at"}

// TestEventColumnsCoverTheModel fails when model.Event gains a column that the hand-built insert would
// silently leave out: add it to eventColumns (bunx/insert.go), or to columnsLeftToDefaults when producers
// never set it.
func TestEventColumnsCoverTheModel(t *testing.T) {
	db := bun.NewDB(nil, pgdialect.New())
	written := make([]string, len(eventColumns))
	for i, c := range eventColumns {
		written[i] = c.name
	}
	for _, f := range db.Table(reflect.TypeFor[model.Event]()).Fields {
		if !slices.Contains(written, f.Name) && !slices.Contains(columnsLeftToDefaults, f.Name) {
			t.Errorf("model.Event has the column %q, which bunx's insert does not write: add it to eventColumns in bunx/insert.go "+
				"(or to columnsLeftToDefaults in this test when producers never set it)", f.Name)
		}
	}
}
