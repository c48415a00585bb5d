package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Option configures Up, Down, Status, NewMigrator and SchemaSQL.
type Option func(*options)

type options struct {
	names tables.Names
	err   error
}

// WithLocation puts bunbox's tables (outbox_events, inbox_events, bunbox_leases, bunbox_stream) and the
// migrations' bookkeeping (bunbox_migrations, bunbox_migration_locks) where loc says (see model.Location):
// into loc.Schema, which Up creates if it does not exist, and named with loc.TablePrefix first
// (orders_outbox_events, orders_bunbox_migrations for "orders_"), and everything named after them too:
// their indexes, constraints and id sequence, the NOTIFY function. The names are qualified and quoted in
// every statement ("tenant_a".outbox_events), so nothing depends on search_path. Each Location has its own
// bookkeeping; the migrations of all Locations of a database share one lock and run one at a time (so that
// behind a pooler two of them never wait for each other's server connection). Give the same Location to
// bunx.WithLocation, worker.WithLocation, relay.Config.Location and the rest (see docs/tenants.md).
//
// loc.Codec is ignored: the schema is the same whatever the payloads' codec. A Location that
// loc.Validate refuses makes the call fail with an error naming the bad field. Defaults to the zero
// Location: today's unqualified names, resolved through search_path.
func WithLocation(loc model.Location) Option {
	return func(o *options) {
		o.names, o.err = tables.Names{}, nil
		if err := loc.Validate(); err != nil {
			o.err = fmt.Errorf("migrate: WithLocation: %w", err)
			return
		}
		o.names, _ = tables.New(loc.Schema, loc.TablePrefix)
	}
}

func applyOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o, o.err
}

// schemaFS returns the migration files for names: FS itself by default, else the files with their
// table names qualified.
func schemaFS(names tables.Names) fs.FS {
	if names.IsDefault() {
		return FS()
	}
	m := fstest.MapFS{}
	err := fs.WalkDir(FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(FS(), path)
		if err != nil {
			return err
		}
		m[path] = &fstest.MapFile{Data: []byte(names.Rewrite(string(data))), Mode: 0o444}
		return nil
	})
	if err != nil {
		panic(err) // embedded files are always readable
	}
	return m
}

// createSchema creates the schema of names if it is not the default and does not exist yet.
func createSchema(ctx context.Context, db *bun.DB, names tables.Names) error {
	if names.Schema() == "" {
		return nil
	}
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+names.QuotedSchema()); err != nil {
		return fmt.Errorf("migrate: create schema %s: %w", names.QuotedSchema(), err)
	}
	return nil
}

// migrator returns the migrator of names.
func migrator(db *bun.DB, names tables.Names) (*bunmigrate.Migrator, error) {
	ms := bunmigrate.NewMigrations()
	if err := ms.Discover(schemaFS(names)); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return bunmigrate.NewMigrator(db, ms,
		bunmigrate.WithTableName(names.Qualify(tableName)),
		bunmigrate.WithLocksTableName(names.Qualify(locksTableName)),
		bunmigrate.WithMarkAppliedOnSuccess(true),
	), nil
}
