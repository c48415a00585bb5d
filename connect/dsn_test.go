package connect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDSN(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		dsn  string
		want pgSettings
	}{
		{"URL", "postgres://app:p%40ss@db.internal:6432/shop?sslmode=verify-full&sslrootcert=/ca.pem&application_name=relay", pgSettings{
			network: "tcp", addr: "db.internal:6432", host: "db.internal", user: "app", password: "p@ss", database: "shop", appName: "relay",
			ssl: sslSettings{mode: "verify-full", rootCert: "/ca.pem", sniEnabled: true}, params: map[string]any{},
		}},
		{"QueryOverridesURL", "postgresql://app:one@db/shop?password=two&user=other&dbname=x&port=7000&host=db2", pgSettings{
			network: "tcp", addr: "db2:7000", host: "db2", user: "other", password: "two", database: "x",
			ssl: sslSettings{sniEnabled: true}, params: map[string]any{},
		}},
		{"SessionParams", "postgres://app@db/shop?search_path=outbox&statement_timeout=5s&connect_timeout=3", pgSettings{
			network: "tcp", addr: "db:5432", host: "db", user: "app", database: "shop", ssl: sslSettings{sniEnabled: true},
			timeouts: map[string]time.Duration{"connect_timeout": 3 * time.Second},
			params:   map[string]any{"search_path": "outbox", "statement_timeout": "5s"},
		}},
		{"IPv6", "postgres://app@[::1]:5433/shop", pgSettings{
			network: "tcp", addr: "[::1]:5433", host: "::1", user: "app", database: "shop", ssl: sslSettings{sniEnabled: true}, params: map[string]any{},
		}},
		{"UnixSocketDir", "postgres://app@/shop?host=/run/postgresql", pgSettings{
			network: "unix", addr: "/run/postgresql/.s.PGSQL.5432", user: "app", database: "shop", ssl: sslSettings{sniEnabled: true}, params: map[string]any{},
		}},
		{"KeyValue", `host=db port=5433 user=app password='it\'s a secret' dbname = shop sslmode=require sslcert=/c.pem sslkey=/k.pem`, pgSettings{
			network: "tcp", addr: "db:5433", host: "db", user: "app", password: "it's a secret", database: "shop",
			ssl: sslSettings{mode: "require", cert: "/c.pem", key: "/k.pem", sniEnabled: true}, params: map[string]any{},
		}},
		{"KeyValueEscapedSpace", `host=db user=app password=se\ cret`, pgSettings{
			network: "tcp", addr: "db:5432", host: "db", user: "app", password: "se cret", ssl: sslSettings{sniEnabled: true}, params: map[string]any{},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseDSN(tt.dsn)
			require.NoError(t, err)
			require.Equal(t, tt.want, *got)
		})
	}
}

func TestParseDSNInvalid(t *testing.T) {
	t.Parallel()

	tests := []struct{ dsn, wantErr string }{
		{"   ", "it is empty"},
		{"mysql://root@db/app", `the scheme is "mysql"`},
		{"postgres://u@db/app?sslmode=sometimes", `sslmode "sometimes" is not one of`},
		{"postgres://u@db/app?sslcert=/c.pem", "sslcert and sslkey go together"},
		{"postgres://u@db/app?sslpassword=x", "parameter sslpassword is not supported"},
		{"postgres://u@db/app?sslcrl=/crl.pem", "parameter sslcrl is not supported"},
		{"postgres://u@db/app?target_session_attrs=read-write", "parameter target_session_attrs is not supported"},
		{"postgres://u@db1,db2/app", "several hosts are not supported"},
		{"host=db1,db2 user=u", "several hosts are not supported"},
		{"postgres://u@db:99999/app", `port "99999" is not a number`},
		{"host=db port=http user=u", `port "http" is not a number`},
		{"postgres://u@db/app?connect_timeout=soon", `connect_timeout="soon"`},
		{"host=db password", "neither a postgres:// URL nor key=value pairs"},
		{"host=db password='open", "has no closing quote"},
		{"postgres://u:Pa%ZZ@db/app", "invalid %-escape"},
		{"postgres://u@db/app#frag", "does not parse"},
	}
	for _, tt := range tests {
		_, err := parseDSN(tt.dsn)
		require.ErrorContains(t, err, tt.wantErr, tt.dsn)
	}
}
