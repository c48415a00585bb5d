package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// By default the relay prepares nothing: its statements run plain, safe behind a transaction pooler.
func TestPreparedStatementsOffByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events := insertEvents(t, b.db, b.queue, 5)
	r := b.newRelay(t, Config{BatchSize: 10})
	for range 3 {
		require.NoError(t, r.rounds.runAll(ctx).Err)
	}
	keyed, mark := r.stmts.Made()
	require.False(t, keyed)
	require.False(t, mark)
	require.True(t, r.stmts.Off())
	requireDeliveredOnce(t, b.inspector, b.queue, events)
}

// The keyed claim that runs prepared (while rows are small) claims each key's head only, in commit
// order: a key's next row only once the row before it completed.
func TestKeyedClaimPreparedKeepsTheOrder(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "Config.PreparedStatements is not for use behind a transaction pooler")
	b := setupPerRow(t)
	ctx := context.Background()
	events := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{
		{Key: "a", Seq: 0}, {Key: "b", Seq: 0}, {Key: "a", Seq: 1}, {Key: "a", Seq: 2}, {Key: "b", Seq: 1},
	})
	r := b.newRelay(t, Config{BatchSize: 10, PreparedStatements: true})
	var got [][]string
	for range 4 {
		res := r.rounds.runAll(ctx)
		require.NoError(t, res.Err)
		var published []string
		require.NoError(t, b.db.NewRaw(`SELECT event_id::text FROM outbox_events
WHERE published_at IS NOT NULL AND completed_at IS NULL ORDER BY id`).Scan(ctx, &published))
		got = append(got, published)
		_, err := b.db.ExecContext(ctx, "UPDATE outbox_events SET completed_at = now() WHERE published_at IS NOT NULL")
		require.NoError(t, err)
	}
	id := func(i int) string { return events[i].EventID.String() }
	require.Equal(t, [][]string{{id(0), id(1)}, {id(2), id(4)}, {id(3)}, nil}, got, "the heads of each round")
	keyed, mark := r.stmts.Made()
	require.True(t, keyed, "the rounds after the first ran the prepared claim")
	require.False(t, r.stmts.Off())
	require.True(t, mark, "the marks ran prepared")
}

// Where the server loses the relay's prepared statements (a pooler in transaction mode hands the
// connection's statements to another client), one round fails and releases its rows, and the relay runs
// the plain statements from then on: every row is still delivered, once.
func TestPreparedStatementsLostFallBack(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "DEALLOCATE through a transaction pooler lands on any server connection")
	b := setupPerRow(t)
	ctx := context.Background()
	b.db.SetMaxOpenConns(1) // one connection, so that DEALLOCATE reaches the relay's statements
	r := b.newRelay(t, Config{BatchSize: 10, PreparedStatements: true})
	first := insertEvents(t, b.db, b.queue, 3)
	require.NoError(t, r.rounds.runAll(ctx).Err) // the first claim is windowed; the marks run prepared
	_, mark := r.stmts.Made()
	require.True(t, mark)
	_, err := b.db.ExecContext(ctx, "DEALLOCATE ALL")
	require.NoError(t, err)

	second := insertEvents(t, b.db, b.queue, 3)
	res := r.rounds.runAll(ctx)
	require.ErrorContains(t, res.Err, "prepared statement", "the statements are gone")
	require.Zero(t, res.Published)
	require.True(t, r.stmts.Off(), "the statements are turned off after %v", res.Err)
	// On pgx, DEALLOCATE ALL dropped the driver's own cached statements too, and pgx forgets each one
	// only when it fails: a round or two more may fail on them, then one runs clean.
	published := 0
	for i := 0; ; i++ {
		res = r.rounds.runAll(ctx)
		published += res.Published
		if res.Err == nil {
			break
		}
		require.Less(t, i, 10, "a round runs clean once pgx has forgotten its statements: %v", res.Err)
	}
	require.Equal(t, 3, published)
	requireDeliveredOnce(t, b.inspector, b.queue, append(first, second...))
}
