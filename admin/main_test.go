package admin

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(outboxtest.Examples(m),
		// database/sql opens connections in the background for pools the tests close at cleanup.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// outboxOf returns the handle on the outbox of db at loc (the default outbox without one).
func outboxOf(t testing.TB, db bun.IDB, loc ...model.Location) *Outbox {
	t.Helper()
	var l model.Location
	if len(loc) > 0 {
		l = loc[0]
	}
	ob, err := New(db, l)
	require.NoError(t, err)
	return ob
}
