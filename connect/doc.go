// Package connect opens bunbox's connections from the strings operators write: a PostgreSQL DSN becomes a
// *bun.DB whose TLS means what libpq's sslmode says (the two differences are below), a Redis URL becomes asynq's connection
// options, and no password in either ever reaches an error, a log line or the output: every error
// carries the string with its password masked (Redact).
//
// In production, ask for verify-full: the server's certificate chain is checked against sslrootcert and
// its name against the host in the URL.
//
//	db, err := connect.Postgres(ctx,
//		"postgres://app:secret@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
//		connect.Options{MaxOpenConns: 20})
//	if err != nil {
//		return err // e.g. connect: cannot connect to PostgreSQL at postgres://app:xxxxx@db.internal:5432/app?...: ...
//	}
//	redisOpt, err := connect.Redis("rediss://app:secret@cache.internal:6380/0")
//	if err != nil {
//		return err
//	}
//	r, err := relay.New(db, redisOpt, relay.Config{})
//
// # Drivers
//
// Options.Driver picks the database/sql driver under the *bun.DB: DriverPgdriver (bun's pgdriver, the
// default), with the connection string read and TLS negotiated by this package as described below, or
// DriverPgx (github.com/jackc/pgx/v5/stdlib), with the string read by pgx.ParseConfig and the pool made
// by stdlib.OpenDB. Both get Options' pool settings and ping, and the same errors: *Error with the string
// redacted (pgx's own parse errors, which quote the string, are replaced by their reason with every
// password this package finds in the string masked, and no pgx error holding the configuration and its
// password stays in the chain; the server's *pgconn.PgError does).
//
// pgx follows libpq itself, and differs from the pgdriver path here in what libpq does: allow tries plain
// text first and TLS only when that is refused; PG* environment variables, ~/.pgpass, ~/.pg_service.conf
// and the default files under ~/.postgresql are read; several hosts, target_session_attrs and sslpassword
// work; parameters pgx does not know are sent as session parameters (pgdriver's dial_timeout,
// read_timeout, write_timeout and timeout are refused: use connect_timeout). Where pgx v5.13.0 differs
// from libpq (read in its pgconn/config.go): sslrootcert=system turns any sslmode into verify-full (libpq
// refuses a weaker sslmode with it), and verify-full sends the host name in the handshake even with
// sslsni=0 (the name is checked either way). The relay's LISTEN wake-up works under both (see relay).
//
// # sslmode
//
// pgdriver v1.2.18 on its own (pgdriver.WithDSN) encrypts without checking the server's certificate when
// the DSN has no sslmode, or allow, prefer, or require without sslrootcert, and refuses a server without TLS where libpq would fall
// back to plain text. Postgres (with DriverPgdriver) and PostgresConnector do what libpq does instead:
//
//	sslmode       TLS                          certificate chain          host name
//	verify-full   required                     checked                    checked
//	verify-ca     required                     checked                    not checked
//	require       required                     checked with sslrootcert,  not checked
//	                                           else not checked (libpq)
//	prefer        if the server has it, else   not checked                not checked
//	(the default) plain text (also after a
//	              failed handshake, as libpq)
//	allow         as prefer (libpq tries plain text first; this package tries TLS first)
//	disable       never                        -                          -
//
// sslrootcert names a PEM file of CA certificates; without it (or with sslrootcert=system) verify-ca and
// verify-full check against the system's roots. Unlike libpq, the default files under ~/.postgresql
// (root.crt, postgresql.crt, postgresql.key) are not read: name them. sslcert and sslkey give a client
// certificate (an unencrypted key: sslpassword is refused); sslsni=0 keeps the host name out of the
// handshake (verify-full still checks it). prefer, the default, protects only against
// passive eavesdropping: an attacker in the path can answer without TLS or with any certificate. A Unix
// socket (host=/run/postgresql) never uses TLS, as in libpq. Other ssl* parameters, and libpq's routing
// parameters that pgdriver does not implement (several hosts, hostaddr, service, target_session_attrs),
// are refused rather than ignored.
//
// # Connection strings
//
// Postgres takes a URL (postgres:// or postgresql://; any parameter can also be a query parameter, such
// as ?password=...) or libpq's key=value form (host=db port=5432 user=app password='a b' dbname=app).
// Parameters that are neither connection nor TLS settings (search_path, statement_timeout...) are set on
// every connection, like Options.Params. With DriverPgdriver, the *sql.DB under the *bun.DB is
// pgdriver's own, so pgdriver.NewListener and the relay's LISTEN/NOTIFY wake-up work, over TLS too.
//
// Redis takes redis://, rediss:// (TLS, verified against the system's roots), redis-socket://,
// redis-sentinel:// (with ?master=NAME) and redis-cluster:// or rediss-cluster:// (a comma-separated list of
// nodes); see Redis for each form.
package connect
