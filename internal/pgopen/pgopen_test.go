package pgopen

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewConnectorTLS(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		dsn        string
		wantTLS    bool
		wantVerify bool
	}{
		{"Disable", "postgres://u@db.example.com:5432/app?sslmode=disable", false, false},
		{"Require", "postgres://u@db.example.com:5432/app?sslmode=require", true, true},
		{"VerifyCA", "postgres://u@db.example.com:5432/app?sslmode=verify-ca", true, true},
		{"VerifyFull", "postgres://u@db.example.com:5432/app?sslmode=verify-full", true, true},
		// No sslmode: pgdriver's opportunistic TLS, unverified, as libpq's prefer.
		{"Default", "postgres://u@db.example.com:5432/app", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := newConnector(tt.dsn, nil)
			require.NoError(t, err)
			tc := c.Config().TLSConfig
			if !tt.wantTLS {
				require.Nil(t, tc)
				return
			}
			require.NotNil(t, tc)
			require.Equal(t, !tt.wantVerify, tc.InsecureSkipVerify)
			if tt.wantVerify {
				require.Equal(t, "db.example.com", tc.ServerName)
				require.Nil(t, tc.VerifyPeerCertificate)
				require.GreaterOrEqual(t, tc.MinVersion, uint16(tls.VersionTLS12))
			}
		})
	}
}

func TestOpenBadURL(t *testing.T) {
	t.Parallel()

	for _, dsn := range []string{"", "postgres://%zz", "mysql://root@localhost/db", "postgres://u@h/db?sslmode=sometimes"} {
		_, err := Open(context.Background(), dsn, Options{})
		require.Error(t, err, dsn)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()

	require.Equal(t, "postgres://u:xxxxx@h/db", Redact("postgres://u:hunter2@h/db"))
	require.Equal(t, "postgres://u@h/db", Redact("postgres://u@h/db"))
	require.Equal(t, "(unparsable URL)", Redact("postgres://%zz"))
}
