package store

import (
	"context"
	"database/sql"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
)

// The wake-up's statements: the sequence behind outbox_events.id, read without a lock on the table.

// wakeSequenceSQL finds the sequence behind outbox_events.id, whether the relay's role may read it, its
// cache size (NULL when there is no such sequence), and the role's name.
const wakeSequenceSQL = `SELECT s, has_sequence_privilege(s, 'SELECT, USAGE'),
  (SELECT seqcache FROM pg_sequence WHERE seqrelid = s::regclass), quote_ident(current_user)
FROM (SELECT pg_get_serial_sequence('outbox_events', 'id') AS s) q`

// Sequence is the sequence behind outbox_events.id, as the relay's role sees it.
type Sequence struct {
	Name    sql.NullString // NULL: the column has no sequence
	Allowed sql.NullBool   // the role may read it (SELECT or USAGE)
	Cache   sql.NullInt64  // its CACHE
	Role    string         // the role, quoted, for the GRANT a warning names
}

// IDSequence reads the sequence behind outbox_events.id.
func IDSequence(ctx context.Context, db bun.IDB, names tables.Names) (Sequence, error) {
	var s Sequence
	err := db.NewRaw(names.SQL(wakeSequenceSQL)).Scan(ctx, &s.Name, &s.Allowed, &s.Cache, &s.Role)
	return s, err
}

// LastValueSQL is the statement that reads the last value of the sequence seq, a literal with no
// arguments: one message to the server and one back, in the simple protocol on either driver.
func LastValueSQL(seq string) string {
	return "SELECT pg_sequence_last_value('" + strings.ReplaceAll(seq, "'", "''") + "'::regclass)"
}

// LastValue runs query, a LastValueSQL, on the *sql.DB under a *bun.DB, so that the query hooks of an
// application (tracing, logging) do not see a statement 200 times a second.
func LastValue(ctx context.Context, db *sql.DB, query string) (sql.NullInt64, error) {
	var v sql.NullInt64
	err := db.QueryRowContext(ctx, query).Scan(&v)
	return v, err
}
