// Package pgerr reads the fields of a PostgreSQL error whatever the driver that returned it: pgdriver's
// Error or pgx's *pgconn.PgError. bunbox branches on SQLSTATE codes and constraint names, never on a
// driver's error type, so that bun over pgdriver and bun over pgx (github.com/jackc/pgx/v5/stdlib) give
// the same errors.
package pgerr

import (
	"errors"
	"reflect"
)

// The package names no driver: a producer-side package that imports it (bunx) must link neither pgdriver
// nor pgx. It recognises each driver's error by its methods instead: pgdriver's Error has Field(byte), and
// pgx's *pgconn.PgError has SQLState() with its fields as exported struct fields.

// SQLSTATE codes bunbox branches on.
const (
	UniqueViolation         = "23505"
	UndefinedTable          = "42P01"
	InsufficientPrivilege   = "42501"
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
	var pgx interface{ SQLState() string }
	if errors.As(err, &pgx) {
		return Fields{
			Code:       pgx.SQLState(),
			Constraint: stringField(pgx, "ConstraintName"),
			Detail:     stringField(pgx, "Detail"),
			Message:    stringField(pgx, "Message"),
		}, true
	}
	var pgd interface{ Field(byte) string }
	if errors.As(err, &pgd) {
		return Fields{Code: pgd.Field('C'), Constraint: pgd.Field('n'), Detail: pgd.Field('D'), Message: pgd.Field('M')}, true
	}
	return Fields{}, false
}

// stringField reads the exported string field name of the struct that v is or points to, or "".
func stringField(v any, name string) string {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return ""
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return ""
	}
	f := rv.FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}

// Is reports whether err carries a PostgreSQL server error with the SQLSTATE code.
func Is(err error, code string) bool {
	f, ok := From(err)
	return ok && f.Code == code
}
