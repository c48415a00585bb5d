package connect

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgxLibpqTLS makes the TLS of a configuration read by pgx.ParseConfig (v5.13.0, pgconn/config.go) do
// what libpq does where pgx does not:
//
//   - verify-ca and verify-full without a root certificate (no sslrootcert, no ~/.postgresql/root.crt):
//     pgx checks against the system's roots, libpq refuses;
//   - sslrootcert=system with an sslmode other than verify-full: pgx turns it into verify-full, libpq
//     refuses;
//   - allow and prefer with a root certificate: pgx checks nothing, libpq checks the chain (and prefer
//     goes on in plain text when the check fails, which pgx's fallback does).
//
// The sslmode and sslrootcert it reads are dsn's (the last of each), or else PGSSLMODE and PGSSLROOTCERT,
// as pgx reads them; getenv is os.Getenv.
func pgxLibpqTLS(dsn string, cfg *pgconn.Config, getenv func(string) string) error {
	var mode, rootCert string
	if kv, err := dsnPairs(dsn); err == nil {
		for _, p := range kv {
			switch p[0] {
			case "sslmode":
				mode = p[1]
			case "sslrootcert":
				rootCert = p[1]
			}
		}
	}
	if mode == "" {
		mode = getenv("PGSSLMODE")
	}
	if rootCert == "" {
		rootCert = getenv("PGSSLROOTCERT")
	}
	if rootCert == "system" && mode != "" && mode != "verify-full" {
		return weakSystemRootsError(mode)
	}
	configs := []*tls.Config{cfg.TLSConfig}
	for _, fb := range cfg.Fallbacks {
		configs = append(configs, fb.TLSConfig)
	}
	for _, tc := range configs {
		if tc == nil {
			continue // plain text
		}
		verifies := !tc.InsecureSkipVerify || tc.VerifyPeerCertificate != nil
		switch {
		case verifies && tc.RootCAs == nil:
			// Only sslrootcert=system verifies against the system's roots, and pgx gives it a pool.
			if mode == "" {
				mode = "verify-full"
			}
			return noRootCertError(defaultRootCert(), mode)
		case !verifies && tc.RootCAs != nil:
			checkChain(tc)
		}
	}
	return nil
}

// checkChain makes tc, which skips verification, check the server's chain against tc.RootCAs, and not
// its name (libpq's allow and prefer with a root certificate).
func checkChain(tc *tls.Config) {
	roots := tc.RootCAs
	tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the server sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, der := range raw {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return err
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
		return err
	}
}
