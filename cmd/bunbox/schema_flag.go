package main

import (
	"errors"
	"flag"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/tables"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/uptrace/bun"
)

// outboxSchemaEnv names the schema of the outbox the commands work on, as relayenv.Config reads it.
const outboxSchemaEnv = "OUTBOX_SCHEMA"

// outboxTablePrefixEnv names the table prefix of the outbox the commands work on, as relayenv.Config
// reads it.
const outboxTablePrefixEnv = "OUTBOX_TABLE_PREFIX"

// schemaFlag adds -schema and -table-prefix to fs: every command accepts them, before or after its name.
func (c *cli) schemaFlag(fs *flag.FlagSet) {
	fs.StringVar(&c.loc.Schema, "schema", c.loc.Schema, "the schema of the outbox (model.Location.Schema); default $"+outboxSchemaEnv+", else today's unqualified tables")
	fs.StringVar(&c.loc.TablePrefix, "table-prefix", c.loc.TablePrefix, "the prefix of the outbox's table names (model.Location.TablePrefix); default $"+outboxTablePrefixEnv+", else none")
}

// checkSchema refuses a schema name or table prefix bunbox cannot use, naming it.
func (c *cli) checkSchema() error {
	_, err := tables.New(c.loc.Schema, c.loc.TablePrefix)
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		return usageError(c.stderr, "-schema (%s): %v", outboxSchemaEnv, err)
	case err != nil:
		return usageError(c.stderr, "-table-prefix (%s): %v", outboxTablePrefixEnv, err)
	}
	return nil
}

// names are the table names of -schema and -table-prefix, checked by checkSchema.
func (c *cli) names() tables.Names {
	n, _ := tables.New(c.loc.Schema, c.loc.TablePrefix)
	return n
}

// admin returns the operator's queries on the outbox of -schema and -table-prefix, run on db.
func (c *cli) admin(db bun.IDB) (*admin.Outbox, error) {
	return admin.New(db, c.loc)
}

// schemaMigrations returns ms for the outbox of -schema: the statements with the table names qualified,
// and the schema created first; ms itself by default.
func (c *cli) schemaMigrations(ms []migrationSQL) []migrationSQL {
	names := c.names()
	if names.IsDefault() || len(ms) == 0 {
		return ms
	}
	out := make([]migrationSQL, len(ms))
	for i, m := range ms {
		out[i] = migrationSQL{name: m.name}
		if i == 0 && names.Schema() != "" {
			out[i].up = append(out[i].up, "CREATE SCHEMA IF NOT EXISTS "+names.QuotedSchema()+";")
		}
		for _, s := range m.up {
			out[i].up = append(out[i].up, names.Rewrite(s))
		}
		for _, s := range m.down {
			out[i].down = append(out[i].down, names.Rewrite(s))
		}
	}
	return out
}

// migrateOptions are the bunboxmigrate options of -schema and -table-prefix.
func (c *cli) migrateOptions() []bunboxmigrate.Option {
	return []bunboxmigrate.Option{bunboxmigrate.WithLocation(c.loc)}
}
