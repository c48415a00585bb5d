package relay

import (
	"context"
	"net/url"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestNewRefusesAReadOnlyDatabase: a database whose transactions are read-only (here a role with
// default_transaction_read_only on, and a connection that sets it) is refused by New, and CheckSchema (the
// readiness probe) says why; every round would fail on it.
func TestNewRefusesAReadOnlyDatabase(t *testing.T) {
	outboxtest.SkipPooled(t, "it creates a login role, which the test PgBouncer has no auth entry for, and grants on a schema the pooler pass does not make; the direct pass runs it")
	t.Parallel()
	ctx := context.Background()
	db, schema := outboxtest.Schema(t)
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}

	admin := outboxtest.Open(t, nil)
	role := "bunbox_ro_" + randHex(4)
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"ALTER ROLE " + role + " SET default_transaction_read_only = on",
	} {
		_, err := admin.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() { // after the role's pool is closed (cleanups run last first)
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.ExecContext(context.Background(), stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	u, err := url.Parse(outboxtest.DatabaseURL())
	require.NoError(t, err)
	u.User = url.User(role)
	byRole := outboxtest.OpenURL(t, u.String(), map[string]any{"search_path": schema})
	bySetting := outboxtest.Open(t, map[string]any{"search_path": schema, "default_transaction_read_only": "on"})

	for name, check := range map[string]func() error{
		"role": func() error {
			_, err := New(byRole, redisOpt, Config{})
			return err
		},
		"connection": func() error {
			_, err := New(bySetting, redisOpt, Config{})
			return err
		},
		"role, readiness":       func() error { return CheckSchema(ctx, byRole, model.Location{}) },
		"connection, readiness": func() error { return CheckSchema(ctx, bySetting, model.Location{}) },
	} {
		err := check()
		require.ErrorIs(t, err, ErrReadOnly, name)
		require.ErrorContains(t, err, "default_transaction_read_only", name)
		t.Logf("%s: %v", name, err)
	}

	// The same schema through a writable connection is fine.
	require.NoError(t, CheckSchema(ctx, db, model.Location{}))
	r, err := New(db, redisOpt, Config{})
	require.NoError(t, err)
	require.NoError(t, r.Close())
}
