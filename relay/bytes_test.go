package relay

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// TestRelayBytes: the task of an event of bytes (model.NewBytesEvent) carries exactly its bytes, with the
// bytes marker in its headers: written without a codec, or encoded and decoded by Config.Codec; without
// Config.Codec an encoded payload is passed through encoded, for the consumer. A listener's task (Routes)
// carries the same bytes.
func TestRelayBytes(t *testing.T) {
	t.Parallel()
	data := append([]byte{0, 0xff, 0xfe, 0xc3, 0x28, 0}, bytes.Repeat([]byte{0, 0x80, 'x'}, 100)...)
	ring, err := model.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.CompressAbove(16), model.EncryptWith(ring))
	require.NoError(t, err)
	for _, tt := range []struct {
		name          string
		writer, relay *model.Codec
		encoded       bool // the task carries the encoded bytes
	}{
		{"NoCodec", nil, nil, false},
		{"NoCodecRelayHasOne", nil, codec, false},
		{"RelayDecodes", codec, codec, false},
		{"PassesThrough", codec, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			var opts []bunx.Option
			if tt.writer != nil {
				opts = append(opts, bunx.WithLocation(model.Location{Codec: tt.writer}))
			}
			ev, err := model.NewBytesEvent("blob.saved", data, model.WithQueue(b.queue), model.WithMetadata("tenant", "t1"))
			require.NoError(t, err)
			routed, err := model.NewBytesEvent("blob.routed", data, model.WithQueue(b.queue))
			require.NoError(t, err)
			require.NoError(t, bunx.New(b.db, opts...).Record(ctx, b.db, ev, routed))

			r := b.newRelay(t, Config{Location: model.Location{Codec: tt.relay}, Routes: fanout.Routes{"blob.routed": {"archive"}}})
			res := r.rounds.runAll(ctx)
			require.NoError(t, res.Err)
			require.Equal(t, 2, res.Published)

			for _, id := range []string{ev.EventID.String(), listenerTaskID(routed.EventID.String(), "archive")} {
				ti, err := b.inspector.GetTaskInfo(b.queue, id)
				require.NoError(t, err)
				require.Equal(t, wire.PayloadFormatBytes, ti.Headers[wire.HeaderPayloadFormat], id)
				if !tt.encoded {
					require.Equal(t, data, ti.Payload, "%s: exactly the bytes", id)
					require.NotContains(t, ti.Headers, wire.HeaderPayloadEncoding)
					continue
				}
				require.Equal(t, "gzip+aes-gcm", ti.Headers[wire.HeaderPayloadEncoding])
				eventID := ev.EventID
				if id != ev.EventID.String() {
					eventID = routed.EventID
				}
				plain, err := codec.Decode(eventID, "gzip+aes-gcm", "k1", ti.Payload)
				require.NoError(t, err)
				require.Equal(t, data, plain)
			}
			ti, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
			require.NoError(t, err)
			require.Equal(t, "t1", ti.Headers["tenant"])
		})
	}
}

// TestRelayRefusesMalformedBytesRows: a row marked as bytes without bytes, or with a format this version
// does not know (written around bunx), is marked dead at once, naming what is wrong.
func TestRelayRefusesMalformedBytesRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, payload_encoded, metadata) VALUES
(gen_random_uuid(), 'no.bytes', ?, 'null', NULL, '{"bunbox-payload-format": "bytes"}'),
(gen_random_uuid(), 'unknown.format', ?, '{"a": 1}', NULL, '{"bunbox-payload-format": "text"}')`, b.queue, b.queue)
	require.NoError(t, err)
	r := b.newRelay(t, Config{})
	require.NoError(t, r.rounds.runAll(ctx).Err)
	var errs []string
	require.NoError(t, b.db.NewRaw(`SELECT last_error FROM outbox_events WHERE dead_at IS NOT NULL ORDER BY id`).Scan(ctx, &errs))
	require.Len(t, errs, 2)
	require.Contains(t, errs[0], "metadata marks a payload of bytes (bunbox-payload-format) and column payload_encoded is NULL")
	require.Contains(t, errs[1], `Metadata key bunbox-payload-format is "text"`)
}
