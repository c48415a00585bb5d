// Package connect opens bunbox's connections from the strings operators write: a PostgreSQL DSN becomes a
// *bun.DB whose TLS means what libpq's sslmode says (the few differences are below), a Redis URL becomes asynq's connection
// options, and no password in either ever reaches an error, a log line or the output: every error
// carries the string with its password masked (Redact).
//
// In production, ask for verify-full: the server's certificate chain is checked against sslrootcert (the
// CA that signed the server's certificate; sslrootcert=system for the system's roots) and its name
// against the host in the URL. Nothing weaker stops an attacker in the path: verify-ca accepts any
// certificate of that CA for any host, require and prefer without a root certificate any certificate.
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
// and the default client certificate under ~/.postgresql are read; several hosts, target_session_attrs and
// sslpassword work; parameters pgx does not know are sent as session parameters (pgdriver's dial_timeout,
// read_timeout, write_timeout and timeout are refused: use connect_timeout). Where pgx v5.13.0 differs
// from libpq's sslmode (read in its pgconn/config.go), this package corrects it: verify-ca and
// verify-full without a root certificate are refused (pgx checks against the system's roots),
// sslrootcert=system with an sslmode other than verify-full is refused (pgx makes it verify-full), and
// allow and prefer with a root certificate check the chain (pgx checks nothing). One difference stays:
// verify-full sends the host name in the handshake even with sslsni=0 (the name is checked either way).
// The relay's LISTEN wake-up works under both (see relay).
//
// # sslmode
//
// pgdriver v1.2.18 on its own (pgdriver.WithDSN) encrypts without checking the server's certificate when
// the DSN has no sslmode, or allow, prefer, or require without sslrootcert, and refuses a server without
// TLS where libpq would fall back to plain text. Postgres (with either driver) does
// what libpq does instead:
//
//	sslmode       TLS                          certificate chain              host name
//	verify-full   required                     checked                        checked
//	verify-ca     required                     checked                        not checked
//	require       required                     checked if there is a root     not checked
//	                                           certificate, else not (libpq)
//	prefer        if the server has it, else   as require; a failed check     not checked
//	(the default) plain text (also after a     means plain text, as libpq
//	              failed handshake, as libpq)
//	allow         as prefer (libpq tries plain text first; so does pgx; pgdriver tries TLS first)
//	disable       never                        -                              -
//
// The root certificate is the PEM file sslrootcert names, or else ~/.postgresql/root.crt when that file
// exists (libpq's default). verify-ca and verify-full without either are refused, as libpq refuses them:
// they never fall back to the system's roots, which trust certificates anyone can get for a host of
// their own. sslrootcert=system (libpq 16) checks against the system's roots and means verify-full: it
// is the default sslmode with it, and any other sslmode is refused. An sslrootcert that names a missing
// file is refused in every mode (libpq ignores it below verify-ca). With the pgdriver path, the default
// client certificate files (~/.postgresql/postgresql.crt and .key) are not read: name them. sslcert and
// sslkey give a client certificate (an unencrypted key: sslpassword is refused); sslsni=0 keeps the host
// name out of the handshake (verify-full still checks it). prefer, the default, protects only against
// passive eavesdropping: an attacker in the path can answer without TLS. A Unix socket
// (host=/run/postgresql) never uses TLS, as in libpq. Other ssl* parameters, and libpq's routing
// parameters that pgdriver does not implement (several hosts, hostaddr, service, target_session_attrs),
// are refused rather than ignored.
//
// White space around a connection string (an environment variable written with a trailing newline) is
// not part of it: Postgres and Redis trim it, and Redact keeps it and masks the same.
//
// # Connection strings
//
// Postgres takes a URL (postgres:// or postgresql://; any parameter can also be a query parameter, such
// as ?password=...) or libpq's key=value form (host=db port=5432 user=app password='a b' dbname=app).
// Parameters that are neither connection nor TLS settings (search_path, statement_timeout...) are set on
// every connection, like Options.Params. With DriverPgdriver, the *sql.DB under the *bun.DB is
// pgdriver's own, so pgdriver.NewListener and the relay's LISTEN/NOTIFY wake-up work, over TLS too.
//
// Redis takes redis://, rediss:// (TLS), redis-socket://, redis-sentinel:// or rediss-sentinel:// (with
// ?master=NAME) and redis-cluster:// or rediss-cluster:// (a comma-separated list of nodes); see Redis
// for each form. The TLS forms always check the server's certificate and name, against the system's
// roots or a private CA given by the URL's tls_ca_file parameter or the REDIS_TLS_CA_FILE variable:
//
//	rediss://:secret@cache.internal:6380/0?tls_ca_file=/etc/ssl/redis-ca.pem
package connect
