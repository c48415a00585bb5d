package connect

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgdriverOnly are the timeouts that pgdriver reads from a connection string and pgx does not: pgx would
// send them to the server as session parameters, which it refuses.
var pgdriverOnly = []string{"dial_timeout", "read_timeout", "write_timeout", "timeout"}

// pgxConfig reads dsn with pgx.ParseConfig, which follows libpq (sslmode, several hosts, PG* environment
// variables, ~/.pgpass, ~/.postgresql), and adds params as session parameters. Its errors are *Error,
// with nothing of pgx's that quotes dsn.
func pgxConfig(dsn string, params map[string]any) (*pgx.ConnConfig, error) {
	if dsn == "" {
		return nil, &Error{Kind: "PostgreSQL", Msg: "no PostgreSQL URL: give one such as postgres://user:pass@host:5432/db?sslmode=verify-full"}
	}
	if i := schemeEnd(dsn); i > 0 {
		if scheme := dsn[:i-3]; scheme != "postgres" && scheme != "postgresql" {
			return nil, newError("PostgreSQL", dsn, fmt.Errorf("the scheme is %q: want postgres:// or postgresql://", scheme), "invalid PostgreSQL URL %s")
		}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, newError("PostgreSQL", dsn, pgxParseError(dsn, err), "invalid PostgreSQL URL %s")
	}
	for _, k := range pgdriverOnly {
		if _, ok := cfg.RuntimeParams[k]; ok {
			return nil, newError("PostgreSQL", dsn, fmt.Errorf("parameter %s is pgdriver's: with pgx, use connect_timeout", k), "invalid PostgreSQL URL %s")
		}
	}
	if err := pgxLibpqTLS(dsn, &cfg.Config, os.Getenv); err != nil {
		return nil, newError("PostgreSQL", dsn, err, "PostgreSQL URL %s: TLS")
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = fmt.Sprint(v)
	}
	return cfg, nil
}

// pgxParseError is what pgx.ParseConfig says is wrong with dsn, without dsn. pgx's *ParseConfigError
// quotes dsn with a best-effort redaction (its doc says an invalid string may keep a password) and holds
// it unredacted in a field, and its cause may quote part of dsn (url.Parse's errors, a key=value word),
// so this keeps pgx's message alone; newError then masks in it every piece of a password of dsn. Where
// this package cannot read dsn either, its own reason, which never quotes a password, is given instead.
func pgxParseError(dsn string, err error) error {
	if _, lexErr := dsnPairs(dsn); lexErr != nil {
		return withoutURL(lexErr)
	}
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return errors.New(err.Error())
	}
	// pgx writes "cannot parse `<dsn redacted>`: <msg>" or "... : <msg> (<cause>)": the prefix is found
	// exactly by asking pgx for the same error without a message.
	msg := strings.TrimPrefix(pe.Error(), pgconn.NewParseConfigError(pe.ConnString, "", nil).Error())
	if cause := pe.Unwrap(); cause != nil {
		msg = strings.TrimSuffix(msg, " ("+cause.Error()+")") + ": " + withoutURL(cause).Error()
	}
	return errors.New(msg)
}

// withoutConfig replaces a *pgconn.ConnectError in err, which holds the whole pgx configuration with its
// password (Config.Password), by an error with the same message that unwraps to what it wraps, so that
// errors.As still finds a *pgconn.PgError (such as 28P01, a wrong password) but never the password.
func withoutConfig(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	return &connectError{msg: err.Error(), err: ce.Unwrap()}
}

type connectError struct {
	msg string
	err error
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }
