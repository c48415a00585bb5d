package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"

	"github.com/bunbox/bunbox/internal/tables"
)

// Option configures Up, Down, Status, NewMigrator and SchemaSQLFor.
type Option func(*options)

type options struct {
	names          tables.Names
	schema, prefix string // WithSchema, WithTablePrefix, as given
	err            error
}

// WithSchema puts bunbox's tables (outbox_events, inbox_events, bunbox_leases) and the migrations'
// bookkeeping (TableName, LocksTableName) into schema, which Up creates if it does not exist: one outbox
// per schema, for schema-per-tenant setups or several outboxes in one database. The names are qualified
// and quoted in every statement ("tenant_a".outbox_events), so nothing depends on search_path. Give the
// same schema to bunx.WithSchema, relay.Config.Schema and the rest (see docs/tenants.md).
//
// schema is 1 to 48 ASCII letters, digits and underscores, not starting with a digit or pg_; case is
// kept ("TenantA" is quoted, so it is not the schema tenanta). Another name makes the call fail with an
// error naming it. "" is the default: today's unqualified names, resolved through search_path. Defaults
// to "".
func WithSchema(schema string) Option {
	return func(o *options) { o.set(schema, o.prefix) }
}

// WithTablePrefix names bunbox's tables with prefix first (orders_outbox_events, orders_inbox_events,
// orders_bunbox_leases for "orders_"), and everything named after them too: their indexes, constraints
// and id sequence, the migrations' bookkeeping (orders_bunbox_migrations, orders_bunbox_migration_locks)
// and lock, the NOTIFY function. Several outboxes, one per prefix, thus live in one schema (WithSchema's,
// or the one search_path finds) and are migrated each on its own. Give the same prefix to
// bunx.WithTablePrefix, relay.Config.TablePrefix and the rest (see docs/tenants.md).
//
// prefix is 1 to 24 lowercase ASCII letters, digits and underscores, not starting with a digit or pg_,
// and with WithSchema's schema it must leave the NOTIFY channel (bunbox_outbox:<schema>:<prefix>) within
// 63 bytes. Another prefix makes the call fail with an error naming it. Defaults to "": today's names.
func WithTablePrefix(prefix string) Option {
	return func(o *options) { o.set(o.schema, prefix) }
}

// set validates schema and prefix together, naming the option that makes them invalid.
func (o *options) set(schema, prefix string) {
	o.schema, o.prefix = schema, prefix
	o.names, o.err = tables.New(schema, prefix)
	switch {
	case errors.Is(o.err, tables.ErrInvalidSchema):
		o.err = fmt.Errorf("migrate: WithSchema: %w", o.err)
	case o.err != nil:
		o.err = fmt.Errorf("migrate: WithTablePrefix: %w", o.err)
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
		bunmigrate.WithTableName(names.Qualify(TableName)),
		bunmigrate.WithLocksTableName(names.Qualify(LocksTableName)),
		bunmigrate.WithMarkAppliedOnSuccess(true),
	), nil
}

// SchemaSQLFor returns SchemaSQL for the options (WithSchema, WithTablePrefix): the schema's CREATE SCHEMA
// IF NOT EXISTS, then the up migrations with the table names qualified and prefixed. `bunbox schema --schema NAME` prints it.
func SchemaSQLFor(opts ...Option) (string, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return "", err
	}
	if o.names.IsDefault() {
		return SchemaSQL(), nil
	}
	if o.names.Schema() == "" { // a prefix only
		return o.names.Rewrite(SchemaSQL()), nil
	}
	return fmt.Sprintf("\nCREATE SCHEMA IF NOT EXISTS %s;\n", o.names.QuotedSchema()) + o.names.Rewrite(SchemaSQL()), nil
}
