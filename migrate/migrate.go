package migrate

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"
)

const (
	// TableName is the table in which Up records the bunbox migrations it applied.
	TableName = "bunbox_migrations"
	// LocksTableName is the lock table of bunbox's own migrator.
	LocksTableName = "bunbox_migration_locks"
)

// lockKey is the pg_advisory_lock key that serialises concurrent Up and Down calls (e.g. several
// replicas starting at once): "bunbox" in ASCII.
const lockKey = 0x62756e626f78

//go:embed sql/*.sql
var files embed.FS

// FS returns the migration files, for tools that read SQL migrations from an fs.FS.
func FS() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	return sub
}

// Migrations returns bunbox's migrations as a new *migrate.Migrations.
func Migrations() (*bunmigrate.Migrations, error) {
	m := bunmigrate.NewMigrations()
	if err := Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Register adds bunbox's migrations to an application's migrations, so that the application's migrator
// applies them along with its own. Their names start with the date they were written (20261129000001_bunbox_…).
func Register(m *bunmigrate.Migrations) error {
	if m == nil {
		return fmt.Errorf("bunbox migrate: Register: migrations must not be nil")
	}
	if err := m.Discover(FS()); err != nil {
		return fmt.Errorf("bunbox migrate: %w", err)
	}
	return nil
}

// NewMigrator returns a migrator for bunbox's migrations that keeps its state in TableName and
// LocksTableName and marks a migration applied only when it succeeded.
func NewMigrator(db *bun.DB) (*bunmigrate.Migrator, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	return bunmigrate.NewMigrator(db, ms,
		bunmigrate.WithTableName(TableName),
		bunmigrate.WithLocksTableName(LocksTableName),
		bunmigrate.WithMarkAppliedOnSuccess(true),
	), nil
}

// Up applies every bunbox migration not applied yet. It is safe to call on every start and from several
// processes at once: calls are serialised with a PostgreSQL advisory lock, and an up-to-date schema is
// left alone.
func Up(ctx context.Context, db *bun.DB) error {
	return withLock(ctx, db, func(m *bunmigrate.Migrator) error {
		if _, err := m.Migrate(ctx); err != nil {
			return fmt.Errorf("bunbox migrate: up: %w", err)
		}
		return nil
	})
}

// Down rolls back every applied bunbox migration, dropping bunbox's tables and the events in them.
func Down(ctx context.Context, db *bun.DB) error {
	return withLock(ctx, db, func(m *bunmigrate.Migrator) error {
		for {
			group, err := m.Rollback(ctx)
			if err != nil {
				return fmt.Errorf("bunbox migrate: down: %w", err)
			}
			if group.IsZero() {
				return nil
			}
		}
	})
}

// Status lists bunbox's migrations with whether and when each was applied.
func Status(ctx context.Context, db *bun.DB) (bunmigrate.MigrationSlice, error) {
	m, err := NewMigrator(db)
	if err != nil {
		return nil, err
	}
	if err := m.Init(ctx); err != nil {
		return nil, fmt.Errorf("bunbox migrate: init: %w", err)
	}
	return m.MigrationsWithStatus(ctx)
}

func withLock(ctx context.Context, db *bun.DB, fn func(*bunmigrate.Migrator) error) (err error) {
	m, err := NewMigrator(db)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("bunbox migrate: connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", lockKey); err != nil {
		return fmt.Errorf("bunbox migrate: lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", lockKey); uerr != nil && err == nil {
			err = fmt.Errorf("bunbox migrate: unlock: %w", uerr)
		}
	}()
	if err := m.Init(ctx); err != nil {
		return fmt.Errorf("bunbox migrate: init: %w", err)
	}
	return fn(m)
}

// SchemaSQL returns the whole schema as plain SQL, the up migrations in order, for teams that migrate with
// goose, Atlas or psql. `bunbox schema` prints it. Every statement is re-runnable, so it applies twice and
// over the schema of any older bunbox.
func SchemaSQL() string {
	names, err := fs.Glob(files, "sql/*.up.sql")
	if err != nil {
		panic(err) // the pattern is valid
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("-- bunbox schema: the up migrations of github.com/bunbox/bunbox/migrate, in order.\n")
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		fmt.Fprintf(&b, "\n-- %s\n", strings.TrimPrefix(name, "sql/"))
		b.WriteString(strings.ReplaceAll(string(data), "--bun:split\n", ""))
	}
	return b.String()
}
