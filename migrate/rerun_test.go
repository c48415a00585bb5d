package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// migrationFile is one of bunbox's migrations as files: its name and the SQL of its up and down files.
type migrationFile struct{ name, up, down string }

// migrationFiles reads every migration of bunboxmigrate.FS in order, those added later included.
func migrationFiles(t *testing.T) []migrationFile {
	t.Helper()
	fsys := bunboxmigrate.FS()
	ups, err := fs.Glob(fsys, "*.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, ups)
	sort.Strings(ups)
	out := make([]migrationFile, 0, len(ups))
	for _, up := range ups {
		upSQL, err := fs.ReadFile(fsys, up)
		require.NoError(t, err)
		downSQL, err := fs.ReadFile(fsys, strings.TrimSuffix(up, ".up.sql")+".down.sql")
		require.NoError(t, err, "every up migration has a down migration")
		out = append(out, migrationFile{name: strings.TrimSuffix(up, ".up.sql"), up: string(upSQL), down: string(downSQL)})
	}
	return out
}

// execSQL runs sql as one multi-statement query, as `psql -f` and golang-migrate send a file (the
// --bun:split lines are SQL comments).
func execSQL(t *testing.T, db *bun.DB, what, sql string) {
	t.Helper()
	_, err := db.DB.ExecContext(context.Background(), sql)
	require.NoError(t, err, what)
}

// fingerprint is the schema db works in, as outboxtest.SchemaFingerprint describes it; never empty.
func fingerprint(t *testing.T, db *bun.DB) string {
	t.Helper()
	fp := outboxtest.SchemaFingerprint(t, db)
	require.NotEmpty(t, fp)
	return fp
}

// upSchema is a fresh schema migrated with Up: the reference the other paths must reach.
func upSchema(t *testing.T) (*bun.DB, string) {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	return db, fingerprint(t, db)
}

// freshSchema is an empty schema and a pool that works in it.
func freshSchema(t *testing.T) *bun.DB {
	t.Helper()
	return outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
}

// `bunbox schema` (SchemaSQL) applied twice gives the schema Up gives.
func TestSchemaSQLAppliesTwice(t *testing.T) {
	t.Parallel()
	_, want := upSchema(t)
	db := freshSchema(t)
	execSQL(t, db, "SchemaSQL, first time", defaultSchemaSQL(t))
	execSQL(t, db, "SchemaSQL, second time", defaultSchemaSQL(t))
	require.Equal(t, want, fingerprint(t, db))
}

// SchemaSQL applied over the schema of every older bunbox (the first k migrations, applied as an older
// `bunbox schema` or by an older Up) brings it to the schema Up gives, and keeps the rows there.
func TestSchemaSQLUpgradesEveryOlderVersion(t *testing.T) {
	t.Parallel()
	_, want := upSchema(t)
	files := migrationFiles(t)
	for k := 0; k <= len(files); k++ {
		for _, how := range []string{"psql", "Up"} {
			t.Run(fmt.Sprintf("%s/first_%d", how, k), func(t *testing.T) {
				t.Parallel()
				db := freshSchema(t)
				switch {
				case how == "psql":
					for _, f := range files[:k] {
						execSQL(t, db, f.name, f.up)
					}
				case k == 0: // an empty schema
				case k < len(files):
					migrateBefore(t, db, files[k].name)
				default:
					require.NoError(t, bunboxmigrate.Up(context.Background(), db))
				}
				if k > 0 { // the first migration makes outbox_events
					execSQL(t, db, "a row of the older release",
						`INSERT INTO outbox_events (event_id, event_name, payload) VALUES (gen_random_uuid(), 'old', '{}')`)
				}
				execSQL(t, db, "SchemaSQL over the first "+fmt.Sprint(k), defaultSchemaSQL(t))
				require.Equal(t, want, fingerprint(t, db))
				if k > 0 {
					require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "event_name = 'old'"))
				}
			})
		}
	}
}

// Every migration file runs again over the schema it made, and every down file runs twice.
func TestEveryMigrationReRuns(t *testing.T) {
	t.Parallel()
	db, want := upSchema(t)
	files := migrationFiles(t)
	for _, f := range files {
		execSQL(t, db, f.name+" again", f.up)
	}
	require.Equal(t, want, fingerprint(t, db))
	for i := len(files) - 1; i >= 0; i-- {
		execSQL(t, db, files[i].name+" down", files[i].down)
		execSQL(t, db, files[i].name+" down again", files[i].down)
	}
	var tables int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()
AND table_name NOT LIKE 'bunbox_migration%'`).Scan(context.Background(), &tables))
	require.Zero(t, tables, "the down migrations dropped every table")
}

// appMigrate applies bunbox's migrations the Register way: merged into the application's migrator,
// which keeps its state in bun's default tables.
func appMigrate(t *testing.T, db *bun.DB) {
	t.Helper()
	ctx := context.Background()
	ms := bunmigrate.NewMigrations()
	require.NoError(t, bunboxmigrate.Register(ms))
	m := bunmigrate.NewMigrator(db, ms, bunmigrate.WithMarkAppliedOnSuccess(true))
	require.NoError(t, m.Init(ctx))
	_, err := m.Migrate(ctx)
	require.NoError(t, err)
	status, err := m.MigrationsWithStatus(ctx)
	require.NoError(t, err)
	require.Empty(t, status.Unapplied())
}

// A team that switches from Up to Register (or back) re-applies every migration under the other
// migrator's table: that works, keeps the rows, and gives the same schema.
func TestSwitchBetweenUpAndRegister(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, want := upSchema(t)
	insert := func(db *bun.DB) {
		execSQL(t, db, "a row", `INSERT INTO outbox_events (event_id, event_name, payload) VALUES (gen_random_uuid(), 'kept', '{}')`)
	}

	t.Run("UpThenRegister", func(t *testing.T) {
		t.Parallel()
		db := freshSchema(t)
		require.NoError(t, bunboxmigrate.Up(ctx, db))
		insert(db)
		appMigrate(t, db)
		require.Equal(t, want, fingerprint(t, db))
		require.NoError(t, bunboxmigrate.Up(ctx, db), "and back")
		require.Equal(t, want, fingerprint(t, db))
		require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "event_name = 'kept'"))
	})
	t.Run("RegisterThenUp", func(t *testing.T) {
		t.Parallel()
		db := freshSchema(t)
		appMigrate(t, db)
		insert(db)
		require.NoError(t, bunboxmigrate.Up(ctx, db))
		require.Equal(t, want, fingerprint(t, db))
		status, err := bunboxmigrate.Status(ctx, db)
		require.NoError(t, err)
		require.Empty(t, status.Unapplied())
		require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "event_name = 'kept'"))
	})
}
