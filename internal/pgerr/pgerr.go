// Package pgerr reads the fields of a PostgreSQL error whatever the driver that returned it: pgdriver's
// Error or pgx's *pgconn.PgError. bunbox branches on SQLSTATE codes and constraint names, never on a
// driver's error type, so that bun over pgdriver and bun over pgx (github.com/jackc/pgx/v5/stdlib) give
// the same errors.
package pgerr

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun/driver/pgdriver"
)

// SQLSTATE codes bunbox branches on.
const (
	UniqueViolation         = "23505"
	UndefinedTable          = "42P01"
	InvalidSQLStatementName = "26000" // a prepared statement the server does not have
	// DuplicatePreparedStatement: a name already prepared on the server connection (behind a transaction
	// pooler, by another client).
	DuplicatePreparedStatement = "42P05"
)

// Fields are the parts of a server error that bunbox reads.
type Fields struct {
	Code       string // SQLSTATE, such as "23505"
	Constraint string // the violated constraint's name, if any
	Detail     string // such as "Key (event_id)=(...) already exists."
	Message    string // the primary message
}

// From returns the fields of the first PostgreSQL server error in err's chain, and false when there is
// none (a network error, a context error, a driver's own error).
func From(err error) (Fields, bool) {
	if err == nil {
		return Fields{}, false
	}
	var pgxErr *pgconn.PgError
	if errors.As(err, &pgxErr) {
		return Fields{Code: pgxErr.Code, Constraint: pgxErr.ConstraintName, Detail: pgxErr.Detail, Message: pgxErr.Message}, true
	}
	var pgdErr pgdriver.Error
	if errors.As(err, &pgdErr) {
		return Fields{Code: pgdErr.Field('C'), Constraint: pgdErr.Field('n'), Detail: pgdErr.Field('D'), Message: pgdErr.Field('M')}, true
	}
	return Fields{}, false
}

// Is reports whether err carries a PostgreSQL server error with the SQLSTATE code.
func Is(err error, code string) bool {
	f, ok := From(err)
	return ok && f.Code == code
}
