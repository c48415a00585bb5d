// Package schemaversion tells which version of bunbox's schema an outbox is at, so that a component
// refuses, naming both versions, to run against a schema newer than it knows, or older than it needs.
//
// The version is the name of the newest bunbox migration applied, a number such as 20261208000002. Each
// migration from that one on ends by writing its own number into the outbox table's comment ("bunbox
// schema 20261208000002"): the comment travels with the table, so it is right whether the migrations ran
// with bunbox's migrator or merged into the application's (migrate.Register), in any schema and with any
// table prefix, and any role that may see the table may read it.
package schemaversion

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
)

// Current is the version of the schema this build of bunbox writes and reads: the name of its newest
// migration, whose up migration writes it into the outbox table's comment (a test of package migrate
// checks both).
const Current = 20261211000001

// commentPrefix opens the outbox table's comment.
const commentPrefix = "bunbox schema "

// readSQL reads the outbox table's comment, "" when it has none.
const readSQL = `SELECT coalesce(obj_description(to_regclass('outbox_events'), 'pg_class'), '')`

// Parse returns the version a comment of the outbox table names, 0 when it names none (a schema older
// than the versions, or a comment of the user's own).
func Parse(comment string) int64 {
	rest, ok := strings.CutPrefix(comment, commentPrefix)
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// Read returns the version of the outbox of names in db (0: none).
func Read(ctx context.Context, db bun.IDB, names tables.Names) (int64, error) {
	var comment string
	if err := db.NewRaw(names.SQL(readSQL)).Scan(ctx, &comment); err != nil {
		return 0, err
	}
	return Parse(comment), nil
}

// Check returns an error, for component (such as "relay"), when the outbox of names in db is at another
// version than Current, naming both and what to do: apply the migrations, or run a newer bunbox.
func Check(ctx context.Context, db bun.IDB, names tables.Names, component string) error {
	v, err := Read(ctx, db, names)
	switch {
	case err != nil:
		return fmt.Errorf("%s: read the schema version of %s: %w", component, names.Outbox(), err)
	case v > Current:
		return fmt.Errorf("%s: the outbox table %s is at bunbox schema version %d, newer than this %s knows (%d): "+
			"run the bunbox release that applied it, or a newer one", component, names.Outbox(), v, component, Current)
	case v < Current:
		at := "at bunbox schema version " + strconv.FormatInt(v, 10)
		if v == 0 {
			at = "at no bunbox schema version (its migrations predate " + strconv.FormatInt(Current, 10) + ")"
		}
		return fmt.Errorf("%s: the outbox table %s is %s, older than this %s needs (%d): apply bunbox's migrations "+
			"(migrate.Up, or `bunbox migrate up`)", component, names.Outbox(), at, component, Current)
	}
	return nil
}
