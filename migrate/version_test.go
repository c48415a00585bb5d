package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/schemaversion"
	"github.com/bunbox/bunbox/internal/tables"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// The newest migration is the version the components know (schemaversion.Current), and it writes that
// version into the outbox table's comment: a migration added without both fails here.
func TestNewestMigrationWritesTheSchemaVersion(t *testing.T) {
	ups, err := fs.Glob(bunboxmigrate.FS(), "*.up.sql")
	require.NoError(t, err)
	sort.Strings(ups)
	newest := ups[len(ups)-1]
	require.True(t, strings.HasPrefix(newest, fmt.Sprint(schemaversion.Current)),
		"the newest migration %s is schemaversion.Current (%d)", newest, schemaversion.Current)
	data, err := fs.ReadFile(bunboxmigrate.FS(), newest)
	require.NoError(t, err)
	require.Contains(t, string(data), fmt.Sprintf("COMMENT ON TABLE outbox_events IS 'bunbox schema %d'", schemaversion.Current))
}

// Up leaves the outbox at the current version, in a schema and with a table prefix too.
func TestUpWritesTheSchemaVersion(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	require.NoError(t, schemaversion.Check(ctx, db, tables.Default(), "test"))

	other := outboxtest.NewSchema(t)
	require.NoError(t, bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: other, TablePrefix: "orders_"})))
	names, err := tables.New(other, "orders_")
	require.NoError(t, err)
	v, err := schemaversion.Read(ctx, db, names)
	require.NoError(t, err)
	require.EqualValues(t, schemaversion.Current, v)
}
