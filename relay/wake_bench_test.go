package relay

import (
	"context"
	"testing"

	"github.com/bunbox/bunbox/internal/maintenance/wakeup"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// BenchmarkWakeRead is the wake-up's statement back to back: its client CPU and round trip, without the
// cost of waking an idle process for each (which the lull part of bench/ measures).
func BenchmarkWakeRead(b *testing.B) {
	db, _ := outboxtest.Schema(b)
	w, err := wakeup.New(db, mustNames(model.Location{}), wakeup.Config{State: &wakeup.State{}, Wake: func() {}, Logger: outboxtest.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	seq, ok := w.Sequence(ctx)
	if !ok {
		b.Fatal("no sequence")
	}
	read := store.LastValueSQL(seq)
	var v *int64
	for b.Loop() {
		if err := db.DB.QueryRowContext(ctx, read).Scan(&v); err != nil {
			b.Fatal(err)
		}
	}
}
