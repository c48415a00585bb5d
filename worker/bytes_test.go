package worker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/worker"
)

// binaryBlob is n bytes that are not JSON: NUL bytes, invalid UTF-8 and a \u0000 escape first, then a
// compressible run, then random bytes.
func binaryBlob(t *testing.T) []byte {
	t.Helper()
	b := []byte{0, 0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80, '"', '\\', 'u', '0', '0', '0', '0', '"', 0}
	b = append(b, bytes.Repeat([]byte{0, 0x80, 'x'}, 1000)...)
	random := make([]byte, 512)
	_, err := rand.Read(random)
	require.NoError(t, err)
	return append(b, random...)
}

// handledBytes is what the bytes pipeline's handler saw.
type handledBytes struct {
	payload []byte
	headers map[string]string
}

// startBytesPipeline runs a relay (with relayCodec) and an asynq server whose "blob.saved" handler is
// Inbox.Handler on an Inbox with inboxCodec, sending what it got, and whose "blob.json" handler is
// HandleJSON, which must refuse bytes.
func startBytesPipeline(t *testing.T, db *bun.DB, queue string, relayCodec, inboxCodec *model.Codec) (*asynq.Inspector, chan handledBytes, *syncBuffer) {
	t.Helper()
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	ins := asynq.NewInspector(redisOpt)
	handled := make(chan handledBytes, 16)
	logs := &syncBuffer{}
	t.Cleanup(func() { deleteQueue(redisOpt, queue); _ = ins.Close() })

	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := worker.NewInbox(db, worker.WithLocation(model.Location{Codec: inboxCodec}), worker.WithInboxLogger(logger))
	mux := asynq.NewServeMux()
	mux.Handle("blob.saved", in.Handler("store", func(_ context.Context, _ bun.Tx, t *asynq.Task) error {
		handled <- handledBytes{payload: bytes.Clone(t.Payload()), headers: t.Headers()}
		return nil
	}))
	mux.Handle("blob.json", worker.HandleJSON(in, "parse", func(_ context.Context, _ bun.Tx, d *docPayload) error {
		handled <- handledBytes{payload: []byte("HandleJSON decoded " + d.ID)}
		return nil
	}))
	srv := asynq.NewServer(redisOpt, worker.ServerConfig(asynq.Config{Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour }}))
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	r, err := relay.New(db, redisOpt, relay.Config{Location: model.Location{Codec: relayCodec}, Logger: logger, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	runCtx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-stopped) })
	return ins, handled, logs
}

// TestBytesFromProducerToHandler follows an event of arbitrary bytes (NUL bytes, invalid UTF-8) from
// bunx through a real relay, Redis and asynq server into an Inbox handler: without a codec, and with a
// codec that compresses and encrypts, decoded by the relay or by the Inbox. The handler gets exactly the
// bytes, with the bytes marker and without the encoding's headers; Redis holds exactly the bytes unless
// the consumer decodes (then encrypted). The same bytes sent to a HandleJSON handler are refused, never
// decoded: the task is archived with an error naming the event and saying it is not JSON.
func TestBytesFromProducerToHandler(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ring := ringOf(t, "k1", map[string][]byte{"k1": codecKey1})
	codec := codecOf(t, model.CompressAbove(64), model.EncryptWith(ring))
	for _, tt := range []struct {
		name                 string
		writer, relay, inbox *model.Codec
		encodedInRedis       bool
	}{
		{"NoCodec", nil, nil, nil, false},
		{"RelayDecodes", codec, codec, nil, false},
		{"ConsumerDecodes", codec, nil, codec, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := outboxtest.Schema(t)
			queue := outboxtest.RandomName("bytes_")
			var opts []bunx.Option
			if tt.writer != nil {
				opts = append(opts, bunx.WithLocation(model.Location{Codec: tt.writer}))
			}
			ob := bunx.New(db, opts...)
			data := binaryBlob(t)
			ev, err := model.NewBytesEvent("blob.saved", data, model.WithQueue(queue), model.WithMetadata("tenant", "t1"))
			require.NoError(t, err)
			// Bytes that happen to be JSON text, for a JSON handler: still bytes, refused.
			asJSON, err := model.NewBytesEvent("blob.json", []byte(`{"id":"x","text":"y"}`), model.WithQueue(queue))
			require.NoError(t, err)
			require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				return ob.Record(ctx, tx, ev, asJSON)
			}))

			ins, handled, logs := startBytesPipeline(t, db, queue, tt.relay, tt.inbox)
			var got handledBytes
			select {
			case got = <-handled:
			case <-time.After(60 * time.Second):
				t.Fatalf("not handled within 60s; logs:\n%s", logs.String())
			}
			require.Equal(t, data, got.payload, "the handler gets exactly the bytes")
			require.Equal(t, wire.PayloadFormatBytes, got.headers[wire.HeaderPayloadFormat])
			require.Equal(t, "t1", got.headers["tenant"])
			require.NotContains(t, got.headers, wire.HeaderPayloadEncoding)
			require.NotContains(t, got.headers, wire.HeaderPayloadKeyID)

			ti, err := ins.GetTaskInfo(queue, ev.EventID.String())
			require.NoError(t, err)
			if tt.encodedInRedis {
				require.NotEqual(t, data, ti.Payload)
				require.Equal(t, "gzip+aes-gcm", ti.Headers[wire.HeaderPayloadEncoding])
			} else {
				require.Equal(t, data, ti.Payload, "Redis holds exactly the bytes")
			}

			var lastErr string
			outboxtest.WaitFor(t, 60*time.Second, "HandleJSON refused the bytes event and asynq archived it", func() bool {
				ti, err := ins.GetTaskInfo(queue, asJSON.EventID.String())
				if err != nil || ti.State != asynq.TaskStateArchived {
					return false
				}
				lastErr = ti.LastErr
				return true
			})
			require.Contains(t, lastErr, "blob.json: event "+asJSON.EventID.String())
			require.Contains(t, lastErr, "the payload is bytes (model.NewBytesEvent), not JSON")
			require.Contains(t, lastErr, "*worker_test.docPayload")
			require.Empty(t, handled, "HandleJSON's fn never ran")
			// The bytes handler sent before its transaction committed: wait for its record, the only one.
			outboxtest.WaitFor(t, 30*time.Second, "the bytes handler's inbox record", func() bool {
				return outboxtest.Count(t, db, "inbox_events", "") == 1
			})
			require.EqualValues(t, 1, outboxtest.Count(t, db, "inbox_events", "handler = 'store'"), "only the bytes handler's record")
			requireNoKeyIn(t, logs.String())
			require.False(t, strings.Contains(logs.String(), string(data[:20])), "no bytes in the logs")
		})
	}
}

// TestDecodeTaskBytes: DecodeTask returns a bytes task that is not encoded as it is, and decodes an
// encoded one to exactly its bytes, keeping the bytes marker.
func TestDecodeTaskBytes(t *testing.T) {
	t.Parallel()
	data := binaryBlob(t)
	ev, err := model.NewBytesEvent("blob.saved", data)
	require.NoError(t, err)
	headers := map[string]string{wire.HeaderEventID: ev.EventID.String(), wire.HeaderPayloadFormat: wire.PayloadFormatBytes}
	plain := asynq.NewTaskWithHeaders("blob.saved", data, headers)
	same, err := worker.DecodeTask(nil, plain)
	require.NoError(t, err)
	require.Same(t, plain, same)

	c := codecOf(t, model.CompressAbove(0), model.EncryptWith(ringOf(t, "k1", map[string][]byte{"k1": codecKey1})))
	enc, encoding, keyID, err := c.Encode(ev.EventID, data)
	require.NoError(t, err)
	encHeaders := map[string]string{wire.HeaderPayloadEncoding: encoding, wire.HeaderPayloadKeyID: keyID}
	for k, v := range headers {
		encHeaders[k] = v
	}
	decoded, err := worker.DecodeTask(c, asynq.NewTaskWithHeaders("blob.saved", enc, encHeaders))
	require.NoError(t, err)
	require.Equal(t, data, decoded.Payload())
	require.Equal(t, headers, decoded.Headers())
}
