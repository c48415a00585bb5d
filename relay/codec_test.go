package relay

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// TestRelayCodecDecodesOrPassesThrough: with Config.Location.Codec the relay enqueues the plain payload without
// the encoding's headers; without one it enqueues the encoded bytes with them, for the consumer.
func TestRelayCodecDecodesOrPassesThrough(t *testing.T) {
	t.Parallel()
	ring, err := model.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.CompressAbove(64), model.EncryptWith(ring))
	require.NoError(t, err)
	for _, decodes := range []bool{true, false} {
		name := map[bool]string{true: "RelayDecodes", false: "PassesThrough"}[decodes]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			ob := bunx.New(b.db, bunx.WithLocation(model.Location{Codec: codec}))
			text := strings.Repeat("personal data ", 20)
			ev, err := model.NewEvent("doc.saved", map[string]string{"text": text}, model.WithQueue(b.queue), model.WithMetadata("tenant", "t1"))
			require.NoError(t, err)
			require.NoError(t, ob.Record(ctx, b.db, ev))

			cfg := Config{}
			if decodes {
				cfg.Location.Codec = codec
			}
			r := b.newRelay(t, cfg)
			res := r.rounds.runAll(ctx)
			require.NoError(t, res.Err)
			require.Equal(t, 1, res.Published)

			ti, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
			require.NoError(t, err)
			require.Equal(t, "t1", ti.Headers["tenant"])
			if decodes {
				require.JSONEq(t, string(ev.Payload), string(ti.Payload))
				require.NotContains(t, ti.Headers, wire.HeaderPayloadEncoding)
				require.NotContains(t, ti.Headers, wire.HeaderPayloadKeyID)
				return
			}
			require.NotContains(t, string(ti.Payload), "personal data", "encrypted in Redis too")
			require.Equal(t, "gzip+aes-gcm", ti.Headers[wire.HeaderPayloadEncoding])
			require.Equal(t, "k1", ti.Headers[wire.HeaderPayloadKeyID])
			plain, err := codec.Decode(ev.EventID, "gzip+aes-gcm", "k1", ti.Payload)
			require.NoError(t, err)
			require.JSONEq(t, string(ev.Payload), string(plain))
		})
	}
}

// TestRelayCodecKeepsUndecodableRows: a row the relay's Codec cannot decode (another key under its id,
// or, after Config.MaxAttempts, a key id its Keyring does not hold) is marked dead, kept, with a
// last_error that names the key id and never a key; nothing reaches Redis, and the rows behind it are
// delivered.
func TestRelayCodecKeepsUndecodableRows(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{1}, 32)
	wrong := bytes.Repeat([]byte{2}, 32)
	for _, tt := range []struct {
		name string
		ring map[string][]byte
		msg  string
	}{
		// MaxAttempts is 1 in this test: an unknown key id is retried (TestRelayCodecRetriesUnknownKeyID).
		{"UnknownKeyID", map[string][]byte{"k2": wrong}, `payload encrypted with a key id the keyring does not hold (event `},
		{"WrongKey", map[string][]byte{"k1": wrong}, "AES-GCM authentication failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			writeRing, err := model.NewKeyring("k1", map[string][]byte{"k1": key})
			require.NoError(t, err)
			writeCodec, err := model.NewCodec(model.EncryptWith(writeRing))
			require.NoError(t, err)
			secret, err := model.NewEvent("doc.saved", map[string]string{"email": "alice@example.com"}, model.WithQueue(b.queue))
			require.NoError(t, err)
			require.NoError(t, bunx.New(b.db, bunx.WithLocation(model.Location{Codec: writeCodec})).Record(ctx, b.db, secret))
			plain := insertEvents(t, b.db, b.queue, 2)

			var readRing string
			for id := range tt.ring {
				readRing = id
			}
			ring, err := model.NewKeyring(readRing, tt.ring)
			require.NoError(t, err)
			codec, err := model.NewCodec(model.EncryptWith(ring))
			require.NoError(t, err)
			r := b.newRelay(t, Config{Location: model.Location{Codec: codec}, MaxAttempts: 1})
			res := r.rounds.runAll(ctx)
			require.NoError(t, res.Err)
			require.Equal(t, 2, res.Published)

			var lastError string
			require.NoError(t, b.db.NewRaw(`SELECT last_error FROM outbox_events WHERE event_id = ? AND dead_at IS NOT NULL
AND published_at IS NULL AND payload_encoded IS NOT NULL`, secret.EventID).Scan(ctx, &lastError))
			require.Contains(t, lastError, `key id "k1"`)
			require.Contains(t, lastError, tt.msg)
			require.Contains(t, lastError, "relay.Config.Location.Codec")
			for _, k := range [][]byte{key, wrong} {
				require.NotContains(t, lastError, hex.EncodeToString(k))
				require.NotContains(t, lastError, string(k))
			}
			_, err = b.inspector.GetTaskInfo(b.queue, secret.EventID.String())
			require.ErrorIs(t, err, asynq.ErrTaskNotFound)
			requireDeliveredOnce(t, b.inspector, b.queue, plain)
			for _, rec := range b.logs.matching("") {
				s := rec.Message
				rec.Attrs(func(a slog.Attr) bool { s += " " + a.Value.String(); return true })
				for _, k := range [][]byte{key, wrong} {
					require.NotContains(t, s, hex.EncodeToString(k), "no key in the relay's log")
				}
			}
		})
	}
}

// TestRelayRefusesMismatchedEncodedRows: a row whose payload_encoded and metadata disagree (written around
// bunx) is marked dead at once, naming what is wrong.
func TestRelayRefusesMismatchedEncodedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, payload_encoded, metadata) VALUES
(gen_random_uuid(), 'no.marker', ?, 'null', '\x01'::bytea, '{}'),
(gen_random_uuid(), 'no.bytes', ?, 'null', NULL, '{"bunbox-payload-encoding": "gzip"}')`, b.queue, b.queue)
	require.NoError(t, err)
	r := b.newRelay(t, Config{})
	require.NoError(t, r.rounds.runAll(ctx).Err)
	var errs []string
	require.NoError(t, b.db.NewRaw(`SELECT last_error FROM outbox_events WHERE dead_at IS NOT NULL ORDER BY id`).Scan(ctx, &errs))
	require.Len(t, errs, 2)
	require.Contains(t, errs[0], "column payload_encoded is set and metadata names no bunbox-payload-encoding")
	require.Contains(t, errs[1], `metadata names the payload encoding "gzip" and column payload_encoded is NULL`)
}

// TestRelayCodecRetriesUnknownKeyID: a row encrypted under a key id the relay's Keyring does not hold (a
// key made current before it reached every relay) is not dead at once, as a corrupt payload is: it is
// charged an attempt and tried again after the backoff, as asynq retries the worker's task
// (worker.DecodeTask), and a relay given the key delivers it; without the key it is dead after
// Config.MaxAttempts, its last_error naming the key id.
func TestRelayCodecRetriesUnknownKeyID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	newCodec := func(current string, keys map[string][]byte) *model.Codec {
		ring, err := model.NewKeyring(current, keys)
		require.NoError(t, err)
		c, err := model.NewCodec(model.EncryptWith(ring))
		require.NoError(t, err)
		return c
	}
	writer := bunx.New(b.db, bunx.WithLocation(model.Location{Codec: newCodec("k2", map[string][]byte{"k1": k1, "k2": k2})}))
	record := func() *model.Event {
		ev, err := model.NewEvent("doc.saved", map[string]string{"email": "alice@example.com"}, model.WithQueue(b.queue))
		require.NoError(t, err)
		require.NoError(t, writer.Record(ctx, b.db, ev))
		return ev
	}
	type rowState struct {
		Attempts  int
		Dead      bool
		Published bool
		LastError string
	}
	state := func(ev *model.Event) rowState {
		var st rowState
		require.NoError(t, b.db.NewRaw(`SELECT attempts, dead_at IS NOT NULL, published_at IS NOT NULL, coalesce(last_error, '')
FROM outbox_events WHERE event_id = ?`, ev.EventID).Scan(ctx, &st.Attempts, &st.Dead, &st.Published, &st.LastError))
		return st
	}

	// A relay with k1 only: the row is charged, not dead, and stays out of Redis.
	old := b.newRelay(t, Config{Location: model.Location{Codec: newCodec("k1", map[string][]byte{"k1": k1})}, MaxAttempts: 3,
		// Long enough that the per-row round of the same iteration (runRounds), which follows the stream
		// round that charged the row and handed it over, does not find it due again.
		RetryBackoff: time.Second, RetryBackoffMax: time.Second})
	ev := record()
	res := old.rounds.runAll(ctx)
	require.NoError(t, res.Err, "an unknown key id is not an outage: the round goes on")
	st := state(ev)
	require.Equal(t, 1, st.Attempts)
	require.False(t, st.Dead, "an unknown key id is retried, not dead at once")
	require.Contains(t, st.LastError, `key id "k2"`)
	require.Contains(t, st.LastError, "the keyring does not hold")
	require.NotContains(t, st.LastError, hex.EncodeToString(k2))
	_, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
	require.True(t, errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound), "not in Redis: %v", err)

	// The relay given k2 delivers it on its next attempt, decoded.
	updated := b.newRelay(t, Config{Location: model.Location{Codec: newCodec("k2", map[string][]byte{"k1": k1, "k2": k2})}})
	outboxtest.WaitFor(t, 10*time.Second, "the row delivered by the relay with the key", func() bool {
		require.NoError(t, updated.rounds.runAll(ctx).Err)
		return state(ev).Published
	})
	ti, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
	require.NoError(t, err)
	require.JSONEq(t, string(ev.Payload), string(ti.Payload))

	// Without the key, it is dead after MaxAttempts.
	ev = record()
	outboxtest.WaitFor(t, 20*time.Second, "the row dead after MaxAttempts", func() bool {
		require.NoError(t, old.rounds.runAll(ctx).Err)
		return state(ev).Dead
	})
	st = state(ev)
	require.Equal(t, 3, st.Attempts)
	require.False(t, st.Published)
	require.Contains(t, st.LastError, `key id "k2"`)
}
