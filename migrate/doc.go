// Package migrate holds bunbox's schema as embedded SQL migrations for bun's migrate package.
//
// The outbox table must exist before the first event is recorded. Apply it with bunbox's own migration
// tables (bunbox_migrations, bunbox_migration_locks), independent of the application's:
//
//	if err := bunboxmigrate.Up(ctx, db); err != nil {
//		return err
//	}
//
// or merge the migrations into the application's own migrator, so one "migrate up" applies both:
//
//	if err := bunboxmigrate.Register(appMigrations); err != nil {
//		return err
//	}
//
// Teams that migrate with goose, golang-migrate, Atlas or plain psql take the same schema from [SchemaSQL], or
// from `bunbox schema` (-format goose, -format golang-migrate, -since for an upgrade).
//
// An outbox in a schema of its own or under a table prefix is migrated with [WithLocation], given the
// model.Location every other part of bunbox takes: bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(loc)).
//
// Every migration is transactional (.tx.up.sql) and has a .tx.down.sql; a migration is marked applied only
// after it succeeded, so a failed Up leaves nothing half-applied and can simply be run again. Every
// migration is also re-runnable (IF NOT EXISTS, constraints in guarded DO blocks, DROP ... IF EXISTS): the
// schema applies over any older bunbox schema whichever tool applied it, and switching between Up and
// Register runs them again harmlessly. A new migration must keep that; the package's tests run every file
// twice and over every older schema.
package migrate
