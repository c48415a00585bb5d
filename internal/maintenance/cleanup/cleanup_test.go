package cleanup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/tables"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		cfg  Config
		want string
	}{
		"NoRetention":   {Config{}, "Retention must be positive"},
		"BatchTooLarge": {Config{Retention: time.Hour, BatchSize: 100001}, "BatchSize must be between 1 and 100000"},
		"NegativeEvery": {Config{Retention: time.Hour, Interval: -time.Second}, "Interval must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := New(nil, tables.Default(), tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
	c, err := New(nil, tables.Default(), Config{Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, intervalDefault, c.cfg.Interval)
	require.Equal(t, batchSizeDefault, c.cfg.BatchSize)
}

// RunOnce deletes the rows published before Retention, BatchSize per statement, and keeps a recent row, a
// row whose ProcessAt is within Retention, an unfinished keyed row and a pending row; it counts what it
// deleted through OnDeleted.
func TestRunOnceDeletesPastRetention(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at, process_at, ordering_key, completed_at)
SELECT gen_random_uuid(), 'old', '{}'::jsonb, now() - interval '2 hours', NULL::timestamptz, NULL::text, NULL::timestamptz FROM generate_series(1, 5)
UNION ALL SELECT gen_random_uuid(), 'recent', '{}', now(), NULL, NULL, NULL
UNION ALL SELECT gen_random_uuid(), 'scheduled', '{}', now() - interval '2 hours', now(), NULL, NULL
UNION ALL SELECT gen_random_uuid(), 'keyed', '{}', now() - interval '2 hours', NULL, 'k', NULL
UNION ALL SELECT gen_random_uuid(), 'pending', '{}', NULL, NULL, NULL, NULL`)
	require.NoError(t, err)
	var deleted int64
	c, err := New(db, tables.Default(), Config{Retention: time.Hour, BatchSize: 2, Logger: outboxtest.Logger(t),
		OnDeleted: func(n int64) { deleted += n }})
	require.NoError(t, err)
	n, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	require.EqualValues(t, 5, deleted)
	var left []string
	require.NoError(t, db.NewRaw("SELECT event_name FROM outbox_events ORDER BY event_name").Scan(ctx, &left))
	require.Equal(t, []string{"keyed", "pending", "recent", "scheduled"}, left)
}
