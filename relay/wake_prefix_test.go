package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestWakeUpWatchesItsTablePrefix: the wake-up of a relay with a table prefix watches the id sequence of
// its own table, not that of the schema's unprefixed outbox or of another prefix's.
func TestWakeUpWatchesItsTablePrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := outboxtest.TenantSchema(t, b.db, "tenant_wp_")
	seqs := map[string]bool{}
	for _, prefix := range []string{"orders_", "billing_"} {
		outboxtest.TenantTables(t, b.db, s, prefix)
		cfg := quietConfig()
		cfg.Location.Schema, cfg.Location.TablePrefix = s, prefix
		r := b.newRelay(t, cfg)
		seq, ok := r.watcher.Sequence(context.Background())
		require.True(t, ok)
		require.Contains(t, []string{s + "." + prefix + "outbox_events_id_seq", `"` + s + `".` + prefix + "outbox_events_id_seq"}, seq)
		seqs[seq] = true
	}
	require.Len(t, seqs, 2)
}
