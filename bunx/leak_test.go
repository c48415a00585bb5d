package bunx_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// InsertHookOnly has an AfterInsert of its own that calls bunx.AfterInsert, and no other hook method:
// the documented way for a model that cannot embed bunx.Hooks.
type InsertHookOnly struct {
	bun.BaseModel `bun:"table:insert_hook_only"`
	ID            int64 `bun:",pk,autoincrement"`
	N             int   `bun:",notnull"`
}

func (*InsertHookOnly) AfterInsert(ctx context.Context, q *bun.InsertQuery) error {
	return bunx.AfterInsert(ctx, q)
}

// ForgetfulUpdate has OnUpdate handlers but an AfterUpdate of its own that calls bunx.AfterUpdate only for
// rows with N == 0 (a mistake: the other rows' update events are never written; OnUpdate refuses a method
// that never calls bunx, but cannot see one that does so only sometimes). Its queries still must not pile
// up in bunx.
type ForgetfulUpdate struct {
	bun.BaseModel `bun:"table:forgetful_update"`
	ID            int64 `bun:",pk,autoincrement"`
	N             int   `bun:",notnull"`
}

func (*ForgetfulUpdate) AfterUpdate(ctx context.Context, q *bun.UpdateQuery) error {
	if row, ok := q.GetModel().Value().(*ForgetfulUpdate); ok && row.N != 0 {
		return nil
	}
	return bunx.AfterUpdate(ctx, q)
}

// leakQueries is how many updates (and, in the first case, deletes) each case runs. Before the fix each
// query kept about 800 bytes: 20,000 × 800 B = 16 MB, four times leakBound.
const (
	leakQueries = 20000
	leakBound   = 4 << 20
)

// The heap stays flat over many updates and deletes of models whose hooks do not take what the query hook
// stored for them. The test measures the live heap, so it does not run in parallel with other tests.
func TestHooksDoNotLeakPerQuery(t *testing.T) { //nolint:paralleltest // measures the heap
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setup(t)
	for _, m := range []any{(*InsertHookOnly)(nil), (*ForgetfulUpdate)(nil)} {
		_, err := b.db.NewCreateTable().Model(m).Exec(ctx)
		require.NoError(t, err)
	}
	bunx.OnInsert(b.ob, func(_ context.Context, m *InsertHookOnly) ([]*model.Event, error) {
		ev, err := model.NewEvent("insert_hook_only.created", map[string]int64{"id": m.ID})
		return []*model.Event{ev}, err
	})
	bunx.OnUpdate(b.ob, func(_ context.Context, m *ForgetfulUpdate) ([]*model.Event, error) {
		ev, err := model.NewEvent("forgetful.updated", map[string]int64{"id": m.ID})
		return []*model.Event{ev}, err
	})

	t.Run("OwnAfterInsertOnly", func(t *testing.T) {
		row := &InsertHookOnly{}
		_, err := b.db.NewInsert().Model(row).Exec(ctx)
		require.NoError(t, err)
		requireFlatHeap(t, 2*leakQueries, func() {
			require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				for i := range leakQueries {
					row.N = i
					if _, err := tx.NewUpdate().Model(row).WherePK().Exec(ctx); err != nil {
						return err
					}
					if _, err := tx.NewDelete().Model(&InsertHookOnly{ID: -1}).WherePK().Exec(ctx); err != nil {
						return err
					}
				}
				return nil
			}))
		})
		require.Equal(t, []string{"insert_hook_only.created"}, b.eventNames(t))
	})

	t.Run("ModelHookThatForgetsBunx", func(t *testing.T) {
		row := &ForgetfulUpdate{}
		_, err := b.db.NewInsert().Model(row).Exec(ctx)
		require.NoError(t, err)
		requireFlatHeap(t, leakQueries, func() {
			require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				for i := range leakQueries {
					row.N = i
					if _, err := tx.NewUpdate().Model(row).WherePK().Exec(ctx); err != nil {
						return err
					}
				}
				return nil
			}))
		})
	})
}

// requireFlatHeap runs work and asserts that the live heap after it is at most leakBound above the live
// heap before it. What a freed query leaves behind is removed by a cleanup that runs after the collection
// that freed the query, so the heap is measured again, collection after collection, until it is within
// the bound or the deadline passes.
func requireFlatHeap(t *testing.T, queries int, work func()) {
	t.Helper()
	before := liveHeap()
	work()
	var after uint64
	outboxtest.WaitFor(t, 10*time.Second, "the live heap back within the bound", func() bool {
		after = liveHeap()
		return after < before+leakBound
	})
	t.Logf("live heap: %d KiB before, %d KiB after %d queries", before>>10, after>>10, queries)
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
