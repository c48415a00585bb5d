package migrate

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"
)

// The tables of bunbox's own migrator: tableName records the bunbox migrations Up applied, and
// locksTableName is its lock table (both in the Location's schema, with its prefix).
const (
	tableName      = "bunbox_migrations"
	locksTableName = "bunbox_migration_locks"
)

// lockKey is the advisory lock key that serialises concurrent Up and Down calls (e.g. several replicas
// starting at once): "bunbox" in ASCII. It is one key for every Location of a database, so that the
// migrations of tenants run one at a time: behind a pooler each holder keeps a server connection for its
// lock and needs a second one to migrate (see withLock), and with a key per Location two tenants migrating
// at once through a pool of two server connections would each hold one and wait for the other's forever.
const lockKey = 0x62756e626f78

// How often a waiting Up tries the lock again: from lockPollMin, doubling up to lockPollMax.
const (
	lockPollMin = 20 * time.Millisecond
	lockPollMax = 500 * time.Millisecond
)

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

// Register adds bunbox's migrations to an application's migrations, so that the application's migrator
// applies them along with its own. Their names start with the date they were written (20261129000001_bunbox_…).
func Register(m *bunmigrate.Migrations) error {
	if m == nil {
		return fmt.Errorf("migrate: Register: migrations must not be nil")
	}
	if err := m.Discover(FS()); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// NewMigrator returns a migrator for bunbox's migrations that keeps its state in the tables
// bunbox_migrations and bunbox_migration_locks and marks a migration applied only when it succeeded.
//
// With WithLocation, the migrations and both tables are in that Location (whose schema NewMigrator does
// not create; Up does).
func NewMigrator(db *bun.DB, opts ...Option) (*bunmigrate.Migrator, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	return migrator(db, o.names)
}

// Up applies every bunbox migration not applied yet. It is safe to call on every start and from several
// processes at once, directly or through a pooler in transaction mode: calls are serialised with a
// transaction-level advisory lock (see withLock), and an up-to-date schema is left alone.
//
// With WithLocation, Up creates the schema if it does not exist and applies the migrations there, keeping
// their bookkeeping in that Location's own bunbox_migrations: each schema is migrated on its own, and again is a
// no-op.
func Up(ctx context.Context, db *bun.DB, opts ...Option) error {
	return withLock(ctx, db, opts, func(m *bunmigrate.Migrator) error {
		if _, err := m.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: up: %w", err)
		}
		return nil
	})
}

// Down rolls back every applied bunbox migration, dropping bunbox's tables and the events in them.
// With WithLocation, it rolls back that Location's migrations (and leaves the schema itself).
func Down(ctx context.Context, db *bun.DB, opts ...Option) error {
	return withLock(ctx, db, opts, func(m *bunmigrate.Migrator) error {
		for {
			group, err := m.Rollback(ctx)
			if err != nil {
				return fmt.Errorf("migrate: down: %w", err)
			}
			if group.IsZero() {
				return nil
			}
		}
	})
}

// Status lists bunbox's migrations with whether and when each was applied.
// With WithLocation, it lists those of that Location.
func Status(ctx context.Context, db *bun.DB, opts ...Option) (bunmigrate.MigrationSlice, error) {
	m, err := NewMigrator(db, opts...)
	if err != nil {
		return nil, err
	}
	if err := m.Init(ctx); err != nil {
		return nil, fmt.Errorf("migrate: init: %w", err)
	}
	return m.MigrationsWithStatus(ctx)
}

// withLock runs fn while this process holds the migration lock: pg_try_advisory_xact_lock in a transaction
// that stays open (and idle) until fn returns, and then rolls back, which releases the lock.
//
// A session-level pg_advisory_lock cannot be used: behind a pooler in transaction mode the lock and the
// unlock land on different server connections, and a pooled server connection keeps the lock while it
// idles, so every later Up waits forever. A transaction's lock goes with the transaction, which a pooler
// keeps on one server connection and ends (or closes) when the client goes away. Waiting callers do not
// block inside a transaction, which would hold a server connection each and could starve the holder of the
// one it needs to migrate: they try, roll back, and try again (every 20ms, doubling up to 500ms) until ctx
// ends. Behind a pooler, Up thus holds one server connection for the lock and needs a second to migrate;
// as the lock is one for the database, at most one Up or Down at a time holds such a connection.
func withLock(ctx context.Context, db *bun.DB, opts []Option, fn func(*bunmigrate.Migrator) error) (err error) {
	o, err := applyOptions(opts)
	if err != nil {
		return err
	}
	m, err := migrator(db, o.names)
	if err != nil {
		return err
	}
	lock, err := acquireLock(ctx, db, lockKey) // one key for every Location: see lockKey
	if err != nil {
		return err
	}
	defer func() {
		if uerr := lock.Rollback(); uerr != nil && !errors.Is(uerr, sql.ErrTxDone) && err == nil {
			err = fmt.Errorf("migrate: unlock: %w", uerr)
		}
	}()
	if err := createSchema(ctx, db, o.names); err != nil {
		return err
	}
	if err := m.Init(ctx); err != nil {
		return fmt.Errorf("migrate: init: %w", err)
	}
	return fn(m)
}

// acquireLock returns a transaction that holds the migration lock, waiting while another one holds it.
func acquireLock(ctx context.Context, db *bun.DB, key int64) (bun.Tx, error) {
	delay := lockPollMin
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			if cause := ended(ctx); cause != nil { // the driver may report the end of ctx as a network timeout
				return bun.Tx{}, fmt.Errorf("migrate: lock: waiting for another migration to finish: %w", cause)
			}
			return bun.Tx{}, fmt.Errorf("migrate: lock: %w", err)
		}
		// The lock's transaction idles while the migrations run on other connections: a database-wide
		// idle_in_transaction_session_timeout must not end it (and release the lock) halfway.
		_, err = tx.ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = 0")
		var locked bool
		if err == nil {
			err = tx.NewRaw("SELECT pg_try_advisory_xact_lock(?)", key).Scan(ctx, &locked)
		}
		if err == nil && locked {
			return tx, nil
		}
		_ = tx.Rollback()
		if err != nil {
			if cause := ended(ctx); cause != nil { // the driver may report the end of ctx as a network timeout
				return bun.Tx{}, fmt.Errorf("migrate: lock: waiting for another migration to finish: %w", cause)
			}
			return bun.Tx{}, fmt.Errorf("migrate: lock: %w", err)
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1)) // jitter: waiting replicas do not retry in step
		select {
		case <-ctx.Done():
			t.Stop()
			return bun.Tx{}, fmt.Errorf("migrate: lock: waiting for another migration to finish: %w", ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, lockPollMax)
	}
}

// ended returns why ctx is done, or context.DeadlineExceeded once its deadline has passed (a driver that
// reads with ctx's deadline, as pgdriver does, can time out a moment before ctx reports it), or nil.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// SchemaSQL returns the whole schema as plain SQL, the up migrations in order, for teams that migrate with
// goose, Atlas or psql. `bunbox schema` prints it. Every statement is re-runnable, so it applies twice and
// over the schema of any older bunbox.
//
// With WithLocation, the SQL starts with the schema's CREATE SCHEMA IF NOT EXISTS and has the table names
// qualified and prefixed (`bunbox schema -schema NAME -table-prefix P` prints it); an invalid Location is
// the only error.
func SchemaSQL(opts ...Option) (string, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return "", err
	}
	switch {
	case o.names.IsDefault():
		return schemaSQL(), nil
	case o.names.Schema() == "": // a prefix only
		return o.names.Rewrite(schemaSQL()), nil
	}
	return fmt.Sprintf("\nCREATE SCHEMA IF NOT EXISTS %s;\n", o.names.QuotedSchema()) + o.names.Rewrite(schemaSQL()), nil
}

// schemaSQL returns the up migrations in order, with the default names.
func schemaSQL() string {
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
