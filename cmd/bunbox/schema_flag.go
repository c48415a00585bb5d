package main

import (
	"context"
	"flag"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/tables"
)

// outboxSchemaEnv names the schema of the outbox the commands work on, as relay.ConfigFromEnv reads it.
const outboxSchemaEnv = "OUTBOX_SCHEMA"

// schemaFlag adds -schema to fs: every command accepts it, before or after its name.
func (c *cli) schemaFlag(fs *flag.FlagSet) {
	fs.StringVar(&c.dbSchema, "schema", c.dbSchema, "the schema of the outbox (bunboxmigrate.WithSchema, relay.Config.Schema); default $"+outboxSchemaEnv+", else today's unqualified tables")
}

// checkSchema refuses a schema name bunbox cannot use, naming it.
func (c *cli) checkSchema() error {
	if _, err := tables.Parse(c.dbSchema); err != nil {
		return usageError(c.stderr, "-schema (%s): %v", outboxSchemaEnv, err)
	}
	return nil
}

// names are the table names of the -schema, checked by checkSchema.
func (c *cli) names() tables.Names {
	n, _ := tables.Parse(c.dbSchema)
	return n
}

// inSchema points the admin queries run with ctx at the outbox of -schema.
func (c *cli) inSchema(ctx context.Context) context.Context {
	if c.dbSchema == "" {
		return ctx
	}
	return admin.WithSchema(ctx, c.dbSchema)
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
		if i == 0 {
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
