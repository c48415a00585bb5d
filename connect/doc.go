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
// # sslmode
//
// pgdriver v1.2.18 on its own (pgdriver.WithDSN) encrypts without checking the server's certificate when
// the DSN has no sslmode, or allow, prefer, or require without sslrootcert, and refuses a server without TLS where libpq would fall
// back to plain text. Postgres and PostgresConnector do what libpq does instead:
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
// every connection, like Options.Params. The *sql.DB under the *bun.DB is pgdriver's own, so
// pgdriver.NewListener and the relay's LISTEN/NOTIFY wake-up work, over TLS too.
//
// Redis takes redis://, rediss:// (TLS, verified against the system's roots), redis-socket://,
// redis-sentinel:// (with ?master=NAME) and redis-cluster:// or rediss-cluster:// (a comma-separated list of
// nodes); see Redis for each form.
package connect
