package connect_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/outboxtest"
)

// tlsServer is a private PostgreSQL with ssl = on, listening on 127.0.0.1 and 127.0.0.2, with a
// certificate for localhost and 127.0.0.1 only, signed by ca; wrongCA signed nothing it serves.
type tlsServer struct {
	pg          *outboxtest.Postgres
	port        string
	caFile      string
	wrongCAFile string
	clientCert  string // signed by ca, for the role certuser
	clientKey   string
}

func startTLSServer(t *testing.T) *tlsServer {
	t.Helper()
	return startTLSServerWith(t, nil)
}

// startTLSServerWith is startTLSServer with extra server settings.
func startTLSServerWith(t *testing.T, config map[string]string) *tlsServer {
	t.Helper()
	outboxtest.SkipShort(t)
	ca, wrong := newTestCA(t, "bunbox test CA"), newTestCA(t, "some other CA")
	srvCert, srvKey := ca.issue(t, "localhost", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "certuser", nil, nil, x509.ExtKeyUsageClientAuth)
	settings := map[string]string{
		"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key", "ssl_ca_file": "ca.crt",
		"listen_addresses": "127.0.0.1,127.0.0.2",
	}
	maps.Copy(settings, config)
	pg := outboxtest.StartPostgresWith(t, outboxtest.PostgresOptions{
		Files: map[string][]byte{
			"server.crt": srvCert, "server.key": srvKey, "ca.crt": ca.pem,
			// certuser must show a client certificate whose CN is its name; everyone else is trusted.
			"pg_hba.conf": []byte("local all all trust\n" +
				"hostssl all certuser 127.0.0.0/8 trust clientcert=verify-full\n" +
				"host all certuser 127.0.0.0/8 reject\n" +
				"host all all 127.0.0.0/8 trust\n"),
		},
		Config: settings,
	})
	_, port, err := net.SplitHostPort(pg.Addr())
	require.NoError(t, err)
	_, err = pg.Open(t, nil).ExecContext(context.Background(), "CREATE ROLE certuser LOGIN SUPERUSER")
	require.NoError(t, err)
	dir := t.TempDir()
	return &tlsServer{
		pg: pg, port: port,
		caFile:      writeFile(t, dir, "ca.pem", ca.pem),
		wrongCAFile: writeFile(t, dir, "wrong-ca.pem", wrong.pem),
		clientCert:  writeFile(t, dir, "client.crt", cliCert),
		clientKey:   writeFile(t, dir, "client.key", cliKey),
	}
}

// dsn is a URL for host on the server with the given query.
func (s *tlsServer) dsn(user, host string, query url.Values) string {
	return fmt.Sprintf("postgres://%s@%s/postgres?%s", user, net.JoinHostPort(host, s.port), query.Encode())
}

// sslInUse reports whether the session of db runs over TLS, as the server sees it.
func sslInUse(t *testing.T, db *bun.DB) bool {
	t.Helper()
	var ssl bool
	require.NoError(t, db.NewRaw("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(context.Background(), &ssl))
	return ssl
}

func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	srv := startTLSServer(t)
	plain := outboxtest.StartPostgres(t) // ssl = off
	_, plainPort, err := net.SplitHostPort(plain.Addr())
	require.NoError(t, err)

	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	tests := []struct {
		name    string
		dsn     string
		wantSSL bool
		wantErr string // "" means the connection works
	}{
		{"VerifyFullRightCA", srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", srv.caFile)), true, ""},
		{"VerifyFullByName", srv.dsn("postgres", "localhost", q("sslmode", "verify-full", "sslrootcert", srv.caFile)), true, ""},
		{"VerifyFullWrongCA", srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", srv.wrongCAFile)), false, "certificate signed by unknown authority"},
		// Without a root certificate (no sslrootcert, no ~/.postgresql/root.crt), libpq refuses to verify.
		{"VerifyFullNoRootCert", srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-full")), false, "the default root certificate file"},
		{"VerifyCANoRootCert", srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-ca")), false, "the default root certificate file"},
		// The system's roots only with sslrootcert=system, which means verify-full (libpq 16).
		{"VerifyFullSystemRoots", srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", "system")), false, "certificate signed by unknown authority"},
		{"SystemRootsAreVerifyFull", srv.dsn("postgres", "127.0.0.1", q("sslrootcert", "system")), false, "certificate signed by unknown authority"},
		{"VerifyCASystemRoots", srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-ca", "sslrootcert", "system")), false, "sslmode=verify-ca may not be used with sslrootcert=system"},
		{"RequireSystemRoots", srv.dsn("postgres", "127.0.0.1", q("sslmode", "require", "sslrootcert", "system")), false, "sslmode=require may not be used with sslrootcert=system"},
		{"PreferSystemRoots", srv.dsn("postgres", "127.0.0.1", q("sslmode", "prefer", "sslrootcert", "system")), false, "sslmode=prefer may not be used with sslrootcert=system"},
		// White space around the URL is not part of it: the URL's host and sslmode hold.
		{"VerifyFullWhiteSpace", " " + srv.dsn("postgres", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", srv.caFile)) + "\n", true, ""},
		{"VerifyFullWhiteSpaceWrongHost", "\t" + srv.dsn("postgres", "127.0.0.2", q("sslmode", "verify-full", "sslrootcert", srv.caFile)) + " \n", false, "not 127.0.0.2"},
		{"VerifyFullWrongHost", srv.dsn("postgres", "127.0.0.2", q("sslmode", "verify-full", "sslrootcert", srv.caFile)), false, "not 127.0.0.2"},
		{"VerifyFullNoSNI", srv.dsn("postgres", "localhost", q("sslmode", "verify-full", "sslrootcert", srv.caFile, "sslsni", "0")), true, ""},
		{"VerifyFullNoSNIWrongHost", srv.dsn("postgres", "127.0.0.2", q("sslmode", "verify-full", "sslrootcert", srv.caFile, "sslsni", "0")), false, "not 127.0.0.2"},
		{"VerifyCAWrongHost", srv.dsn("postgres", "127.0.0.2", q("sslmode", "verify-ca", "sslrootcert", srv.caFile)), true, ""},
		{"VerifyCAWrongCA", srv.dsn("postgres", "127.0.0.2", q("sslmode", "verify-ca", "sslrootcert", srv.wrongCAFile)), false, "certificate signed by unknown authority"},
		{"Require", srv.dsn("postgres", "127.0.0.2", q("sslmode", "require")), true, ""},
		// libpq: require with a root certificate verifies the chain, as verify-ca.
		{"RequireWithRootCertWrongCA", srv.dsn("postgres", "127.0.0.2", q("sslmode", "require", "sslrootcert", srv.wrongCAFile)), false, "certificate signed by unknown authority"},
		{"RequireWithRootCertWrongHost", srv.dsn("postgres", "127.0.0.2", q("sslmode", "require", "sslrootcert", srv.caFile)), true, ""},
		{"Prefer", srv.dsn("postgres", "127.0.0.1", q("sslmode", "prefer")), true, ""},
		{"NoSSLModeIsPrefer", srv.dsn("postgres", "127.0.0.1", nil), true, ""},
		{"Allow", srv.dsn("postgres", "127.0.0.1", q("sslmode", "allow")), true, ""},
		// certuser may not connect in plain text: allow goes on to TLS (pgx: after trying plain text, as libpq).
		{"AllowTLSOnlyUser", srv.dsn("certuser", "127.0.0.1", q("sslmode", "allow", "sslcert", srv.clientCert, "sslkey", srv.clientKey)), true, ""},
		// libpq checks the chain in every mode when it has a root certificate; prefer then goes on in plain
		// text when the check fails (allow tries plain text first under pgx, as libpq).
		{"PreferWithRootCert", srv.dsn("postgres", "127.0.0.2", q("sslmode", "prefer", "sslrootcert", srv.caFile)), true, ""},
		{"PreferWithRootCertWrongCA", srv.dsn("postgres", "127.0.0.1", q("sslmode", "prefer", "sslrootcert", srv.wrongCAFile)), false, ""},
		{"AllowWithRootCertWrongCA", srv.dsn("postgres", "127.0.0.1", q("sslmode", "allow", "sslrootcert", srv.wrongCAFile)), false, ""},
		{"Disable", srv.dsn("postgres", "127.0.0.1", q("sslmode", "disable")), false, ""},
		{"KeyValueVerifyFull", fmt.Sprintf("host=localhost port=%s user=postgres dbname=postgres sslmode=verify-full sslrootcert='%s'", srv.port, srv.caFile), true, ""},
		{"ClientCert", srv.dsn("certuser", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", srv.caFile, "sslcert", srv.clientCert, "sslkey", srv.clientKey)), true, ""},
		{"ClientCertMissing", srv.dsn("certuser", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", srv.caFile)), false, "certificate"},

		// A server without TLS: prefer (and no sslmode) fall back to plain text, require refuses.
		{"PlainServerPrefer", fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=prefer", plainPort), false, ""},
		{"PlainServerNoSSLMode", fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres", plainPort), false, ""},
		{"PlainServerAllow", fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=allow", plainPort), false, ""},
		{"PlainServerRequire", fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=require", plainPort), false, "does not accept TLS"},
		{"PlainServerVerifyFull", fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=verify-full&sslrootcert=%s", plainPort, srv.caFile), false, "does not accept TLS"},
	}
	// What pgx (DriverPgx, pgx.ParseConfig) does where it differs from this package's pgdriver path.
	pgxDiffers := map[string]struct {
		wantSSL bool
		wantErr string
	}{
		"Allow":                 {false, ""}, // as libpq: plain text first, TLS only when the server refuses it
		"PlainServerRequire":    {false, "server refused TLS connection"},
		"PlainServerVerifyFull": {false, "server refused TLS connection"},
	}
	for _, driver := range drivers {
		t.Run(string(driver), func(t *testing.T) {
			t.Parallel()
			t.Run("PoolAndListener", func(t *testing.T) {
				t.Parallel()
				testPoolAndListener(t, srv, driver)
			})
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					if d, ok := pgxDiffers[tt.name]; ok && driver == connect.DriverPgx {
						tt.wantSSL, tt.wantErr = d.wantSSL, d.wantErr
					}
					if strings.Contains(tt.wantErr, "default root certificate") && defaultRootCertExists() {
						t.Skip("~/.postgresql/root.crt exists: libpq and pgx use it")
					}
					db, err := connect.Postgres(context.Background(), tt.dsn, connect.Options{Driver: driver, MaxOpenConns: 2})
					if tt.wantErr != "" {
						t.Log(err)
						require.ErrorContains(t, err, tt.wantErr)
						var cerr *connect.Error
						require.ErrorAs(t, err, &cerr)
						return
					}
					require.NoError(t, err)
					t.Cleanup(func() { _ = db.Close() })
					require.Equal(t, tt.wantSSL, sslInUse(t, db))
				})
			}
		})
	}
}

// defaultRootCertExists reports whether ~/.postgresql/root.crt, libpq's default sslrootcert, exists.
func defaultRootCertExists() bool {
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(home, ".postgresql", "root.crt"))
	return err == nil
}

// TestPostgresDefaultRootCert: without sslrootcert, ~/.postgresql/root.crt is the root certificate, as in
// libpq; with one, every sslmode checks the chain. Not parallel: it sets HOME.
func TestPostgresDefaultRootCert(t *testing.T) {
	srv := startTLSServer(t)
	rightCA, err := os.ReadFile(srv.caFile)
	require.NoError(t, err)
	wrongCA, err := os.ReadFile(srv.wrongCAFile)
	require.NoError(t, err)
	home := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(home, ".postgresql"), 0o700))
	t.Setenv("HOME", home)

	tests := []struct {
		name, rootCrt, host, sslmode string
		wantSSL                      bool
		wantErr                      string
	}{
		{"VerifyCA", "right", "127.0.0.2", "verify-ca", true, ""},
		{"VerifyFull", "right", "localhost", "verify-full", true, ""},
		{"VerifyFullWrongHost", "right", "127.0.0.2", "verify-full", false, "not 127.0.0.2"},
		{"RequireIsVerifyCA", "right", "127.0.0.2", "require", true, ""},
		{"VerifyCAWrongCA", "wrong", "127.0.0.1", "verify-ca", false, "certificate signed by unknown authority"},
		{"RequireWrongCA", "wrong", "127.0.0.1", "require", false, "certificate signed by unknown authority"},
		{"PreferWrongCA", "wrong", "127.0.0.1", "prefer", false, ""}, // the check fails: plain text
		{"Missing", "", "127.0.0.1", "verify-ca", false, "the default root certificate file " + filepath.Join(home, ".postgresql", "root.crt") + " does not exist"},
		{"MissingRequire", "", "127.0.0.1", "require", true, ""},
	}
	for _, driver := range drivers {
		for _, tt := range tests {
			t.Run(string(driver)+"/"+tt.name, func(t *testing.T) {
				path := filepath.Join(home, ".postgresql", "root.crt")
				switch tt.rootCrt {
				case "right":
					require.NoError(t, os.WriteFile(path, rightCA, 0o600))
				case "wrong":
					require.NoError(t, os.WriteFile(path, wrongCA, 0o600))
				default:
					require.NoError(t, os.RemoveAll(path))
				}
				db, err := connect.Postgres(context.Background(), srv.dsn("postgres", tt.host, url.Values{"sslmode": {tt.sslmode}}), connect.Options{Driver: driver})
				if tt.wantErr != "" {
					require.ErrorContains(t, err, tt.wantErr)
					return
				}
				require.NoError(t, err)
				t.Cleanup(func() { _ = db.Close() })
				require.Equal(t, tt.wantSSL, sslInUse(t, db))
			})
		}
	}
}

// drivers are the drivers the tests of Postgres run on, each.
var drivers = []connect.Driver{connect.DriverPgdriver, connect.DriverPgx}

// testPoolAndListener checks, on srv, that Options.Params work over TLS, and with pgdriver that its
// Listener (the relay's wake-up) does too.
func testPoolAndListener(t *testing.T, srv *tlsServer, driver connect.Driver) {
	dsn := srv.dsn("postgres", "localhost", url.Values{"sslmode": {"verify-full"}, "sslrootcert": {srv.caFile}})
	db, err := connect.Postgres(context.Background(), dsn, connect.Options{Driver: driver, Params: map[string]any{"search_path": "pg_catalog"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	// Options.Params reach every connection, over TLS.
	var path string
	require.NoError(t, db.NewRaw("SHOW search_path").Scan(context.Background(), &path))
	require.Equal(t, "pg_catalog", path)
	require.True(t, sslInUse(t, db))
	if driver != connect.DriverPgdriver {
		return // the relay's wake-up under pgx dials the pool's configuration: relay's tests cover it
	}

	// pgdriver's Listener (the relay's wake-up) dials through the same connector, so over TLS too.
	ln := pgdriver.NewListener(db)
	t.Cleanup(func() { _ = ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ln.Listen(ctx, "connect_test"))
	// A NOTIFY that races the LISTEN can be missed: send until one arrives, within ctx's deadline.
	for {
		require.NoError(t, pgdriver.Notify(ctx, db, "connect_test", "hello"))
		channel, payload, err := ln.ReceiveTimeout(ctx, time.Second)
		if err == nil {
			require.Equal(t, "connect_test", channel)
			require.Equal(t, "hello", payload)
			return
		}
		require.NoError(t, ctx.Err(), "no notification over TLS: %v", err)
	}
}

// libpq's prefer starts again in plain text when the TLS handshake fails; require does not. The server
// offers only TLS 1.1, which Go's client refuses.
func TestPostgresPreferAfterAFailedHandshake(t *testing.T) {
	t.Parallel()
	srv := startTLSServerWith(t, map[string]string{"ssl_min_protocol_version": "TLSv1", "ssl_max_protocol_version": "TLSv1.1"})

	for _, driver := range drivers {
		t.Run(string(driver), func(t *testing.T) {
			t.Parallel()
			opts := connect.Options{Driver: driver}
			db, err := connect.Postgres(context.Background(), srv.dsn("postgres", "127.0.0.1", url.Values{"sslmode": {"prefer"}}), opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			require.False(t, sslInUse(t, db))

			_, err = connect.Postgres(context.Background(), srv.dsn("postgres", "127.0.0.1", url.Values{"sslmode": {"require"}}), opts)
			require.ErrorContains(t, err, "protocol version")
		})
	}
}

func TestPostgresDriver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	_, err := connect.Postgres(ctx, "postgres://u:secret@127.0.0.1:1/db", connect.Options{Driver: "mysql"})
	require.ErrorContains(t, err, `Options.Driver "mysql" is not "pgdriver" or "pgx"`)
	require.NotContains(t, err.Error(), "secret")

	// pgx would send pgdriver's own timeouts to the server as session parameters.
	_, err = connect.Postgres(ctx, "postgres://u@127.0.0.1:1/db?read_timeout=5s", connect.Options{Driver: connect.DriverPgx})
	require.ErrorContains(t, err, "parameter read_timeout is pgdriver's: with pgx, use connect_timeout")
	// pgx's own reason, without the string it quotes.
	_, err = connect.Postgres(ctx, "postgres://u:secret@127.0.0.1:1/db?sslmode=sometimes", connect.Options{Driver: connect.DriverPgx})
	require.EqualError(t, err, "connect: invalid PostgreSQL URL postgres://u:xxxxx@127.0.0.1:1/db?sslmode=sometimes: failed to configure TLS: sslmode is invalid")

	outboxtest.SkipShort(t)
	for _, driver := range drivers {
		t.Run(string(driver), func(t *testing.T) {
			t.Parallel()
			// The pool is the driver's.
			db, err := connect.Postgres(ctx, outboxtest.DatabaseURL(), connect.Options{Driver: driver})
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			want := map[connect.Driver]string{connect.DriverPgdriver: "pgdriver.Driver", connect.DriverPgx: "*stdlib.Driver"}[driver]
			require.Equal(t, want, fmt.Sprintf("%T", db.Driver()))

			// The server's error stays reachable by its SQLSTATE (3D000: no such database).
			u, err := url.Parse(outboxtest.DatabaseURL())
			require.NoError(t, err)
			u.Path = "/no_such_database"
			_, err = connect.Postgres(ctx, u.String(), connect.Options{Driver: driver})
			require.ErrorContains(t, err, "3D000")
			switch driver {
			case connect.DriverPgx:
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr)
				require.Equal(t, "3D000", pgErr.Code)
			default:
				var pgErr pgdriver.Error
				require.ErrorAs(t, err, &pgErr)
				require.Equal(t, "3D000", pgErr.Field('C'))
			}
		})
	}
}
