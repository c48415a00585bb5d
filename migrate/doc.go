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
// Teams that migrate with goose, Atlas or plain psql take the same schema from [SchemaSQL].
//
// Every migration is transactional (.tx.up.sql) and has a .tx.down.sql; a migration is marked applied only
// after it succeeded, so a failed Up leaves nothing half-applied and can simply be run again.
package migrate
