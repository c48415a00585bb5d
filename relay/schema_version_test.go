package relay

import (
	"context"
	"fmt"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/schemaversion"
	"github.com/bunbox/bunbox/model"
)

// A relay refuses, naming both versions, an outbox at a bunbox schema version newer than it knows (a
// newer release migrated it) or older than it needs (the migrations were not applied); at its own version
// it starts.
func TestRelayRefusesAnotherSchemaVersion(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	for _, tc := range []struct {
		comment string
		want    []string
	}{
		{fmt.Sprintf("bunbox schema %d", schemaversion.Current+1), []string{
			fmt.Sprintf("version %d, newer than this relay knows (%d)", schemaversion.Current+1, schemaversion.Current),
			"run the bunbox release that applied it"}},
		{"bunbox schema 20261207000001", []string{
			fmt.Sprintf("version 20261207000001, older than this relay needs (%d)", schemaversion.Current),
			"apply bunbox's migrations"}},
		{"", []string{"at no bunbox schema version", "apply bunbox's migrations"}},
	} {
		_, err := db.ExecContext(ctx, "COMMENT ON TABLE outbox_events IS "+quoteOrNull(tc.comment))
		require.NoError(t, err)
		_, err = New(db, redis, Config{})
		require.Error(t, err, "comment %q", tc.comment)
		for _, w := range tc.want {
			require.Contains(t, err.Error(), w)
		}
		require.ErrorContains(t, CheckSchema(ctx, db, model.Location{}), tc.want[0], "the readiness check says the same")
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf("COMMENT ON TABLE outbox_events IS 'bunbox schema %d'", schemaversion.Current))
	require.NoError(t, err)
	r, err := New(db, redis, Config{})
	require.NoError(t, err)
	require.NoError(t, r.Close())
}

func quoteOrNull(s string) string {
	if s == "" {
		return "NULL"
	}
	return "'" + s + "'"
}
