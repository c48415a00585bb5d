package relay

import (
	"context"
	"testing"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// BenchmarkWakeRead is the wake-up's statement back to back: its client CPU and round trip, without the
// cost of waking an idle process for each (which the lull part of bench/ measures).
func BenchmarkWakeRead(b *testing.B) {
	db, _ := outboxtest.Schema(b)
	r := &Relay{db: db, log: outboxtest.Logger(b)}
	ctx := context.Background()
	seq, ok := r.wakeSequence(ctx)
	if !ok {
		b.Fatal("no sequence")
	}
	read := wakeReadSQL(seq)
	var v *int64
	for b.Loop() {
		if err := db.DB.QueryRowContext(ctx, read).Scan(&v); err != nil {
			b.Fatal(err)
		}
	}
}
