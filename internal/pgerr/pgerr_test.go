package pgerr_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/pgerr"
)

// TestFromEveryDriver provokes the server errors bunbox branches on through pgdriver and through pgx, in
// one run whatever BUNBOX_TEST_DRIVER says, and reads the same fields from both.
func TestFromEveryDriver(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	schema := outboxtest.NewSchema(t)
	cfg, err := pgx.ParseConfig(outboxtest.DatabaseURL())
	require.NoError(t, err)
	drivers := map[string]*sql.DB{
		"pgdriver": sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(outboxtest.DatabaseURL()))),
		"pgx":      stdlib.OpenDB(*cfg),
	}
	ctx := context.Background()
	_, err = drivers["pgx"].ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s.t (k int CONSTRAINT t_k_key UNIQUE)`, schema))
	require.NoError(t, err)
	for name, db := range drivers {
		t.Run(name, func(t *testing.T) {
			defer db.Close()
			_, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s.t VALUES (1), (1)`, schema))
			f, ok := pgerr.From(fmt.Errorf("wrapped: %w", err))
			require.True(t, ok, "%T: %v", err, err)
			require.Equal(t, pgerr.UniqueViolation, f.Code)
			require.Equal(t, "t_k_key", f.Constraint)
			require.Equal(t, "Key (k)=(1) already exists.", f.Detail)
			require.Contains(t, f.Message, "duplicate key value violates unique constraint")

			_, err = db.ExecContext(ctx, fmt.Sprintf(`SELECT * FROM %s.missing`, schema))
			require.True(t, pgerr.Is(err, pgerr.UndefinedTable), "%T: %v", err, err)
			require.False(t, pgerr.Is(err, pgerr.UniqueViolation))
		})
	}
}

func TestFromNoServerError(t *testing.T) {
	t.Parallel()
	for _, err := range []error{nil, errors.New("dial tcp: refused"), context.Canceled} {
		_, ok := pgerr.From(err)
		require.False(t, ok, "%v", err)
		require.False(t, pgerr.Is(err, pgerr.UndefinedTable))
	}
}
