package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

func TestSchemaUsage(t *testing.T) {
	t.Parallel()
	plain, err := bunboxmigrate.SchemaSQL()
	require.NoError(t, err)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"Plain", []string{"schema"}, 0, plain, ""},
		{"PlainFormat", []string{"schema", "-format", "sql"}, 0, plain, ""},
		{"Goose", []string{"schema", "-format", "goose"}, 0, "-- +goose Up\n-- 20261129000001_bunbox_outbox_events\nCREATE TABLE IF NOT EXISTS outbox_events", ""},
		{"GooseDollarQuoted", []string{"schema", "-format", "goose"}, 0, "-- +goose StatementBegin\n-- Guarded", ""},
		{"UnknownFormat", []string{"schema", "-format", "flyway"}, 2, "", `-format "flyway": want sql, goose or golang-migrate`},
		{"GolangMigrateNoDir", []string{"schema", "-format", "golang-migrate"}, 2, "", "give the directory with -dir"},
		{"PlainDir", []string{"schema", "-dir", "x"}, 2, "", "-dir and -version are for -format goose and golang-migrate"},
		{"VersionNoDir", []string{"schema", "-format", "goose", "-version", "1"}, 2, "", "give -dir too"},
		{"VersionNotDigits", []string{"schema", "-format", "goose", "-dir", "x", "-version", "v1"}, 2, "", `-version "v1": want digits only`},
		{"SinceUnknown", []string{"schema", "-since", "20200101000000"}, 2, "", `-since "20200101000000" is no bunbox migration; they are: 20261129000001_bunbox_outbox_events`},
		{"SinceVersion", []string{"schema", "-since", "20261129000001"}, 0, "after 20261129000001.", ""},
		{"SinceName", []string{"schema", "-since", "20261129000001_bunbox_outbox_events"}, 0, "\n-- 20261129000003_bunbox_inbox\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			require.Equal(t, tt.wantCode, code, "stdout: %s\nstderr: %s", stdout, stderr)
			require.Contains(t, stdout, tt.wantStdout)
			require.Contains(t, stderr, tt.wantStderr)
		})
	}
	code, stdout, _ := runCLI(t, nil, "schema", "-since", "20261129000001")
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, "CREATE TABLE IF NOT EXISTS outbox_events", "-since leaves out the migrations before")
}

// schemaOutput runs `bunbox schema` with args and returns what it printed.
func schemaOutput(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, nil, append([]string{"schema"}, args...)...)
	require.Equal(t, 0, code, stderr)
	return stdout
}

// appTable is the application's own migration in the goose and golang-migrate tests.
const appTable = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL);"

// referenceSchema is the fingerprint of bunbox's schema (applied with Up, as it is: not turned off in the
// BUNBOX_TEST_STREAM=off pass) beside the application's table.
func referenceSchema(t *testing.T) string {
	t.Helper()
	db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
	require.NoError(t, bunboxmigrate.Up(context.Background(), db))
	_, err := db.DB.Exec(appTable)
	require.NoError(t, err)
	return outboxtest.SchemaFingerprint(t, db)
}

// gooseFile is a goose SQL migration.
func gooseFile(up, down string) *fstest.MapFile {
	return &fstest.MapFile{Data: fmt.Appendf(nil, "-- +goose Up\n%s\n-- +goose Down\n%s\n", up, down)}
}

// newGoose is goose's provider over fsys, keeping its version table in db's schema.
func newGoose(t *testing.T, db *bun.DB, fsys fstest.MapFS) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db.DB, fsys)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func insertOld(t *testing.T, db *bun.DB, name string) {
	t.Helper()
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, payload) VALUES (gen_random_uuid(), $1, '{}')`, name)
	require.NoError(t, err)
}

// The goose output of `bunbox schema -format goose` runs through goose itself: up, down (only bunbox's
// tables go), up again; and, from every older bunbox schema applied with goose, the upgrade that
// `-since` prints goes up over it, keeps the rows, and comes down to that older schema.
func TestSchemaGoose(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	want := referenceSchema(t)

	t.Run("UpDownUp", func(t *testing.T) {
		t.Parallel()
		db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
		p := newGoose(t, db, fstest.MapFS{
			"00001_orders.sql": gooseFile(appTable, "DROP TABLE orders;"),
			"00002_bunbox.sql": {Data: []byte(schemaOutput(t, "-format", "goose"))},
		})
		res, err := p.Up(ctx)
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Equal(t, want, outboxtest.SchemaFingerprint(t, db))
		insertOld(t, db, "kept")

		_, err = p.Down(ctx)
		require.NoError(t, err)
		var tables []string
		require.NoError(t, db.NewRaw(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()
AND table_name <> 'goose_db_version' ORDER BY 1`).Scan(ctx, &tables))
		require.Equal(t, []string{"orders"}, tables, "goose down removed bunbox's tables only")

		_, err = p.Up(ctx)
		require.NoError(t, err)
		require.Equal(t, want, outboxtest.SchemaFingerprint(t, db))
	})

	all, err := readMigrations()
	require.NoError(t, err)
	for k := 1; k <= len(all); k++ {
		older := all[k-1].name
		t.Run("UpgradeFrom_"+older, func(t *testing.T) {
			t.Parallel()
			db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
			fsys := fstest.MapFS{
				"00001_orders.sql":       gooseFile(appTable, "DROP TABLE orders;"),
				"00002_bunbox_older.sql": {Data: []byte(gooseSchema(all[:k], ""))}, // what an older bunbox printed
			}
			_, err := newGoose(t, db, fsys).Up(ctx)
			require.NoError(t, err)
			olderSchema := outboxtest.SchemaFingerprint(t, db)
			insertOld(t, db, "older")

			fsys["00003_bunbox_upgrade.sql"] = &fstest.MapFile{Data: []byte(schemaOutput(t, "-format", "goose", "-since", older))}
			p := newGoose(t, db, fsys)
			res, err := p.Up(ctx)
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.Equal(t, want, outboxtest.SchemaFingerprint(t, db))
			require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "event_name = 'older'"))

			_, err = p.Down(ctx)
			require.NoError(t, err)
			require.Equal(t, olderSchema, outboxtest.SchemaFingerprint(t, db), "the upgrade's down returns to the older schema")
			require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "event_name = 'older'"))
			_, err = p.Up(ctx)
			require.NoError(t, err)
			require.Equal(t, want, outboxtest.SchemaFingerprint(t, db))

			// A team that took the whole schema again instead of -since: it re-runs over the older one.
			fsys["00004_bunbox_whole.sql"] = &fstest.MapFile{Data: []byte(schemaOutput(t, "-format", "goose"))}
			_, err = newGoose(t, db, fsys).UpTo(ctx, 4)
			require.NoError(t, err)
			require.Equal(t, want, outboxtest.SchemaFingerprint(t, db))
		})
	}
}

// `bunbox schema -format golang-migrate` writes an up and a down file, which golang-migrate sends each
// as one query; the up file applies over every older schema and twice, the down file drops what it made.
func TestSchemaGolangMigrate(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	want := referenceSchema(t)
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, nil, "schema", "-format", "golang-migrate", "-dir", dir, "-version", "000002")
	require.Equal(t, 0, code, stderr)
	upPath, downPath := filepath.Join(dir, "000002_bunbox.up.sql"), filepath.Join(dir, "000002_bunbox.down.sql")
	require.Equal(t, "wrote "+downPath+"\nwrote "+upPath+"\n", stdout)
	up, err := os.ReadFile(upPath)
	require.NoError(t, err)
	down, err := os.ReadFile(downPath)
	require.NoError(t, err)

	code, _, stderr = runCLI(t, nil, "schema", "-format", "golang-migrate", "-dir", dir, "-version", "000002")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "000002_bunbox.")
	require.Contains(t, stderr, "exists: not overwritten")

	all, err := readMigrations()
	require.NoError(t, err)
	for k := 0; k <= len(all); k++ {
		t.Run(fmt.Sprintf("over_the_first_%d", k), func(t *testing.T) {
			t.Parallel()
			db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
			_, err := db.DB.Exec(appTable)
			require.NoError(t, err)
			for _, m := range all[:k] {
				_, err := db.DB.Exec(strings.Join(m.up, ";\n"))
				require.NoError(t, err, m.name)
			}
			for range 2 {
				_, err = db.DB.Exec(string(up))
				require.NoError(t, err)
				require.Equal(t, want, outboxtest.SchemaFingerprint(t, db))
			}
			_, err = db.DB.Exec(string(down))
			require.NoError(t, err)
			var tables []string
			require.NoError(t, db.NewRaw(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`).
				Scan(context.Background(), &tables))
			require.Equal(t, []string{"orders"}, tables)
		})
	}
}
