package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// Compression bombs for TestRelayHeapUnderCompressionBombs: legit rows, each a payload of the Codec's
// default limit (1 MiB) that gzips to about 1 KiB, and bombs of 4 MiB written by a Codec that allows
// them, which the relay's Codec (the default limit) refuses.
const (
	bombLegitRows = 80
	bombRows      = 4
	bombSize      = 4 << 20
)

// decodedHeapBound is the most the relay's live heap may grow by while it delivers the bombs at a zero
// Config (BatchBytes 16 MiB, the Codec's limit 1 MiB): three times what decodedBudget bounds, the decoded
// payloads in flight and asynq's task messages (copies of them), BatchBytes + twice the Codec's limit.
// The measure (sampleLiveHeap, a collection forced every 10ms) counts live what the relay allocates
// while a collection marks, 10 MiB and more here, and a loaded machine makes the marks longer; the rows'
// stored bytes are a few KiB. Before the relay decoded per enqueue, a round held all its rows decoded
// until it ended: with these rows the heap grew by 99 to 108 MiB, on either path.
const decodedHeapBound = 3 * (batchBytesDefault + 2*wire.DefaultMaxPayloadSize)

// TestRelayHeapUnderCompressionBombs: rows whose stored size is small and decoded size large do not take
// the relay's memory past its bound (decodedHeapBound) on the per-row path nor on the stream, at a zero
// Config with a Codec; the rows that decode past the Codec's limit are kept dead with a last_error naming
// it, and the rows behind them are delivered. Not parallel: it measures the process's heap.
func TestRelayHeapUnderCompressionBombs(t *testing.T) {
	outboxtest.SkipShort(t)
	for _, streamed := range []bool{false, true} {
		t.Run(map[bool]string{false: "PerRow", true: "Stream"}[streamed], func(t *testing.T) {
			ctx := context.Background()
			ring, err := model.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})
			require.NoError(t, err)
			codec, err := model.NewCodec(model.CompressAbove(256), model.EncryptWith(ring))
			require.NoError(t, err)
			wide, err := model.NewCodec(model.CompressAbove(256), model.EncryptWith(ring), model.MaxDecodedSize(bombSize))
			require.NoError(t, err)
			b := setup(t)
			bomber := bunx.New(b.db, bunx.WithLocation(model.Location{Codec: wide}))
			if streamed {
				require.NoError(t, EnableStream(ctx, b.db, model.Location{}))
			}

			// The legit rows share one gzipped payload (gzip alone is not bound to the event id), inserted as
			// bunx writes them; each bomb comes through an Outbox whose Codec allows it, ahead of a run of them.
			gz, err := model.NewCodec(model.CompressAbove(256))
			require.NoError(t, err)
			legit, encoding, _, err := gz.Encode(uuid.Nil, bombPayload(wire.DefaultMaxPayloadSize))
			require.NoError(t, err)
			require.Equal(t, wire.EncodingGzip, encoding)
			var bombIDs []string
			for range bombRows {
				ev, err := model.NewEvent("doc.bomb", bombPayload(bombSize), model.WithQueue(b.queue))
				require.NoError(t, err)
				require.NoError(t, bomber.Record(ctx, b.db, ev))
				bombIDs = append(bombIDs, ev.EventID.String())
				_, err = b.db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, payload_encoded, metadata)
SELECT gen_random_uuid(), 'doc.saved', ?, 'null', ?, '{"bunbox-payload-encoding": "gzip"}' FROM generate_series(1, ?)`,
					b.queue, legit, bombLegitRows/bombRows)
				require.NoError(t, err)
			}
			var stored int64
			require.NoError(t, b.db.NewRaw(`SELECT sum(octet_length(payload_encoded)) FROM outbox_events`).Scan(ctx, &stored))
			t.Logf("%d rows, %d KiB stored, %d MiB decoded", bombLegitRows+bombRows, stored>>10, (bombLegitRows*wire.DefaultMaxPayloadSize+bombRows*bombSize)>>20)

			r, err := New(b.db, b.redis, Config{Location: model.Location{Codec: codec}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Close() })
			base, peak, stopSampling := sampleLiveHeap()
			stop := run(t, r)
			outboxtest.WaitFor(t, 60*time.Second, "the legit rows enqueued and the bombs dead", func() bool {
				info, err := b.inspector.GetQueueInfo(b.queue)
				return err == nil && info.Size == bombLegitRows &&
					outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL") == bombRows
			})
			stop()
			stopSampling()
			grew := int64(peak()) - int64(base)
			t.Logf("live heap: %d MiB before, grew by at most %d MiB (bound %d MiB)", base>>20, grew>>20, decodedHeapBound>>20)
			require.LessOrEqual(t, grew, int64(decodedHeapBound), "the relay's live heap grew past its bound")

			var lastErrors []string
			require.NoError(t, b.db.NewRaw(`SELECT last_error FROM outbox_events WHERE dead_at IS NOT NULL
AND event_id::text IN (?) ORDER BY id`, bun.List(bombIDs)).Scan(ctx, &lastErrors))
			require.Len(t, lastErrors, bombRows)
			for _, msg := range lastErrors {
				require.Contains(t, msg, "relay.Config.Location.Codec")
				require.Contains(t, msg, "decompresses to more than 1048576 bytes, the codec's limit (model.MaxDecodedSize)")
			}
		})
	}
}

// bombPayload is a JSON payload of n bytes that gzip makes about a thousandth of it.
func bombPayload(n int) json.RawMessage {
	return json.RawMessage(`{"pad":"` + strings.Repeat("a", n-10) + `"}`)
}

// sampleLiveHeap measures the live heap (what a collection it forces marks live) now, as base, and then
// every 10ms until stop; peak is the largest it saw.
func sampleLiveHeap() (base uint64, peak func() uint64, stop func()) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		runtime.GC()
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base = live()
	var most atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if n := live(); n > most.Load() {
					most.Store(n)
				}
			}
		}
	})
	return base, most.Load, sync.OnceFunc(func() { close(done); wg.Wait() })
}
