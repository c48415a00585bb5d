package outboxtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestDriverSelects opens the pool on the driver BUNBOX_TEST_DRIVER names, with the given parameters.
func TestDriverSelects(t *testing.T) {
	for _, tc := range []struct {
		env, want string
	}{{"", "pgdriver"}, {"pgdriver", "pgdriver"}, {"pgx", "pgx"}} {
		t.Run("Env"+tc.env, func(t *testing.T) {
			t.Setenv(outboxtest.DriverEnv, tc.env)
			d, err := outboxtest.Driver()
			require.NoError(t, err)
			require.Equal(t, tc.want, d)
			sqldb, err := outboxtest.OpenSQL(outboxtest.DatabaseURL(), map[string]any{"application_name": "bunbox_driver_test"})
			require.NoError(t, err)
			defer sqldb.Close()
			switch tc.want {
			case "pgx":
				require.IsType(t, &stdlib.Driver{}, sqldb.Driver())
			default:
				require.IsType(t, pgdriver.Driver{}, sqldb.Driver())
			}
			if testing.Short() {
				return
			}
			var app string
			require.NoError(t, sqldb.QueryRowContext(context.Background(), "SHOW application_name").Scan(&app))
			require.Equal(t, "bunbox_driver_test", app)
		})
	}
	t.Run("Unknown", func(t *testing.T) {
		t.Setenv(outboxtest.DriverEnv, "lib/pq")
		_, err := outboxtest.Driver()
		require.EqualError(t, err, `BUNBOX_TEST_DRIVER="lib/pq": want "pgdriver" or "pgx"`)
		_, err = outboxtest.OpenSQL(outboxtest.DatabaseURL(), nil)
		require.ErrorContains(t, err, "BUNBOX_TEST_DRIVER")
	})
}
