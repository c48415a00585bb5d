package relay

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/model"
)

// adminOf returns the operator's handle on the default outbox of db.
func adminOf(t testing.TB, db bun.IDB) *admin.Outbox {
	t.Helper()
	ob, err := admin.New(db, model.Location{})
	require.NoError(t, err)
	return ob
}
