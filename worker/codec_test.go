package worker_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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

type docPayload struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

var (
	codecKey1 = bytes.Repeat([]byte{0x11}, 32)
	codecKey2 = bytes.Repeat([]byte{0x22}, 32)
)

func ringOf(t *testing.T, current string, keys map[string][]byte) *model.Keyring {
	t.Helper()
	k, err := model.NewKeyring(current, keys)
	require.NoError(t, err)
	return k
}

func codecOf(t *testing.T, opts ...model.CodecOption) *model.Codec {
	t.Helper()
	c, err := model.NewCodec(opts...)
	require.NoError(t, err)
	return c
}

// syncBuffer is a log destination that tests read while the worker writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// requireNoKeyIn fails when s shows one of the test keys.
func requireNoKeyIn(t *testing.T, s string) {
	t.Helper()
	for _, k := range [][]byte{codecKey1, codecKey2} {
		require.NotContains(t, s, hex.EncodeToString(k))
		require.NotContains(t, s, string(k))
	}
}

// codecPipeline runs a relay (with relayCodec) and an asynq server whose "doc.saved" handler is
// HandleJSON on an Inbox with inboxCodec; the handler sends what it decoded.
type codecPipeline struct {
	queue   string
	ins     *asynq.Inspector
	handled chan docPayload
	logs    *syncBuffer
}

func startCodecPipeline(t *testing.T, db *bun.DB, queue string, relayCodec, inboxCodec *model.Codec) *codecPipeline {
	t.Helper()
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	p := &codecPipeline{queue: queue, ins: asynq.NewInspector(redisOpt), handled: make(chan docPayload, 16), logs: &syncBuffer{}}
	t.Cleanup(func() { deleteQueue(redisOpt, queue); _ = p.ins.Close() }) // runs last, after the server stopped

	logger := slog.New(slog.NewTextHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := worker.NewInbox(db, worker.WithLocation(model.Location{Codec: inboxCodec}), worker.WithInboxLogger(logger))
	mux := asynq.NewServeMux()
	mux.Handle("doc.saved", worker.HandleJSON(in, "index", func(_ context.Context, _ bun.Tx, d *docPayload) error {
		p.handled <- *d
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
	return p
}

// TestCodecFromProducerToHandler follows plain, compressed, encrypted and compressed-and-encrypted events,
// one encrypted under a key that was current before a rotation, through a real relay, Redis and asynq
// server into HandleJSON: the relay decodes them (relay.Config.Location.Codec), or passes them through and the
// Inbox decodes them (worker.WithLocation). Each handler gets the payload the producer gave; what Redis
// holds is plain in the first case and encrypted in the second; no key appears in any log.
func TestCodecFromProducerToHandler(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	for _, relayDecodes := range []bool{true, false} {
		t.Run(map[bool]string{true: "RelayDecodes", false: "ConsumerDecodes"}[relayDecodes], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := outboxtest.Schema(t)
			queue := outboxtest.RandomName("codec_")
			oldRing := ringOf(t, "k1", map[string][]byte{"k1": codecKey1})
			rotated := ringOf(t, "k2", map[string][]byte{"k1": codecKey1, "k2": codecKey2})
			writers := map[string]*bunx.Outbox{
				"plain":     bunx.New(db),
				"gzip":      bunx.New(db, bunx.WithLocation(model.Location{Codec: codecOf(t, model.CompressAbove(128))})),
				"aes-gcm":   bunx.New(db, bunx.WithLocation(model.Location{Codec: codecOf(t, model.EncryptWith(oldRing))})), // k1, before the rotation
				"gzip+k2":   bunx.New(db, bunx.WithLocation(model.Location{Codec: codecOf(t, model.CompressAbove(128), model.EncryptWith(rotated))})),
				"small+gz":  bunx.New(db, bunx.WithLocation(model.Location{Codec: codecOf(t, model.CompressAbove(128))})), // below the threshold: plain
				"aes-gcm-2": bunx.New(db, bunx.WithLocation(model.Location{Codec: codecOf(t, model.EncryptWith(rotated))})),
			}
			want := map[string]docPayload{}
			var events []*model.Event
			for name := range writers {
				text := strings.Repeat("personal data of "+name+". ", 20)
				if name == "small+gz" {
					text = "short"
				}
				d := docPayload{ID: name, Text: text}
				ev, err := model.NewEvent("doc.saved", d, model.WithQueue(queue))
				require.NoError(t, err)
				want[name] = d
				events = append(events, ev)
			}
			require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				for _, ev := range events {
					var d docPayload
					require.NoError(t, jsonUnmarshal(ev.Payload, &d))
					if err := writers[d.ID].Record(ctx, tx, ev); err != nil {
						return err
					}
				}
				return nil
			}))
			require.EqualValues(t, 4, outboxtest.Count(t, db, "outbox_events", "payload_encoded IS NOT NULL"))

			// After the rotation the decoding side holds both keys, current k2.
			decoder := codecOf(t, model.EncryptWith(rotated))
			var p *codecPipeline
			if relayDecodes {
				p = startCodecPipeline(t, db, queue, decoder, nil)
			} else {
				p = startCodecPipeline(t, db, queue, nil, decoder)
			}
			got := map[string]docPayload{}
			for range len(want) {
				select {
				case d := <-p.handled:
					got[d.ID] = d
				case <-time.After(60 * time.Second):
					t.Fatalf("handled %d of %d events within 60s; logs:\n%s", len(got), len(want), p.logs.String())
				}
			}
			require.Equal(t, want, got)

			for _, ev := range events {
				ti, err := p.ins.GetTaskInfo(queue, ev.EventID.String())
				require.NoError(t, err)
				var d docPayload
				require.NoError(t, jsonUnmarshal(ev.Payload, &d))
				encoded := d.ID != "plain" && d.ID != "small+gz"
				if relayDecodes || !encoded {
					require.JSONEq(t, string(ev.Payload), string(ti.Payload), "%s: plain in Redis", d.ID)
					require.NotContains(t, ti.Headers, wire.HeaderPayloadEncoding)
					continue
				}
				require.NotContains(t, string(ti.Payload), "personal data", "%s: encoded in Redis", d.ID)
				require.NotEmpty(t, ti.Headers[wire.HeaderPayloadEncoding], d.ID)
			}
			requireNoKeyIn(t, p.logs.String())
		})
	}
}

// TestCodecConsumerWithTheWrongKeyFailsLoudly: a consumer whose Keyring holds another key under the
// payload's key id never runs the handler: the task is archived (the bytes can never decode with it) with
// an error naming the key id. A consumer without the key id, or without a codec, has its task retried
// (a deploy with the key fixes it), with an error naming the key id. No key appears in any error or log.
func TestCodecConsumerWithTheWrongKeyFailsLoudly(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	for _, tt := range []struct {
		name     string
		inbox    *model.Codec
		archived bool
		msg      string
	}{
		{"WrongKeyUnderTheID", codecOf(t, model.EncryptWith(ringOf(t, "k1", map[string][]byte{"k1": codecKey2}))), true, "AES-GCM authentication failed"},
		{"UnknownKeyID", codecOf(t, model.EncryptWith(ringOf(t, "k2", map[string][]byte{"k2": codecKey2}))), false, "the keyring holds k2"},
		{"NoCodec", nil, false, "no codec was given to decode it (worker.WithLocation)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := outboxtest.Schema(t)
			queue := outboxtest.RandomName("codec_")
			ob := bunx.New(db, bunx.WithLocation(model.Location{Codec: codecOf(t, model.EncryptWith(ringOf(t, "k1", map[string][]byte{"k1": codecKey1})))}))
			ev, err := model.NewEvent("doc.saved", docPayload{ID: "x", Text: "secret"}, model.WithQueue(queue))
			require.NoError(t, err)
			require.NoError(t, ob.Record(ctx, db, ev))

			p := startCodecPipeline(t, db, queue, nil, tt.inbox)
			var lastErr string
			outboxtest.WaitFor(t, 60*time.Second, "the task failed", func() bool {
				ti, err := p.ins.GetTaskInfo(queue, ev.EventID.String())
				if err != nil || ti.LastErr == "" {
					return false
				}
				lastErr = ti.LastErr
				if tt.archived {
					return ti.State == asynq.TaskStateArchived
				}
				return ti.State == asynq.TaskStateRetry
			})
			require.Contains(t, lastErr, `key id "k1"`)
			require.Contains(t, lastErr, tt.msg)
			require.Contains(t, lastErr, ev.EventID.String())
			requireNoKeyIn(t, lastErr)
			require.Empty(t, p.handled, "the handler never ran")
			require.Zero(t, outboxtest.Count(t, db, "inbox_events", ""), "nothing recorded in the inbox")
			outboxtest.WaitFor(t, 10*time.Second, "the Inbox logged the failure", func() bool {
				return strings.Contains(p.logs.String(), "payload does not decode")
			})
			requireNoKeyIn(t, p.logs.String())
		})
	}
}

// TestDecodeTask decodes a task by hand, as a plain asynq handler without the Inbox would.
func TestDecodeTask(t *testing.T) {
	t.Parallel()
	c := codecOf(t, model.CompressAbove(0), model.EncryptWith(ringOf(t, "k1", map[string][]byte{"k1": codecKey1})))
	id := uuid.New()
	payload := []byte(`{"id":"x","text":"` + strings.Repeat("t", 200) + `"}`)
	data, encoding, keyID, err := c.Encode(id, payload)
	require.NoError(t, err)
	task := asynq.NewTaskWithHeaders("doc.saved", data, map[string]string{wire.HeaderEventID: id.String(),
		wire.HeaderPayloadEncoding: encoding, wire.HeaderPayloadKeyID: keyID, "tenant": "t1"})
	plain, err := worker.DecodeTask(c, task)
	require.NoError(t, err)
	require.Equal(t, payload, plain.Payload())
	require.Equal(t, map[string]string{wire.HeaderEventID: id.String(), "tenant": "t1"}, plain.Headers())

	same, err := worker.DecodeTask(nil, plain)
	require.NoError(t, err)
	require.Same(t, plain, same, "a task that is not encoded is returned as it is")

	noID := asynq.NewTaskWithHeaders("doc.saved", data, map[string]string{wire.HeaderPayloadEncoding: encoding})
	_, err = worker.DecodeTask(c, noID)
	require.ErrorIs(t, err, worker.ErrMalformedTask)
	require.ErrorIs(t, err, asynq.SkipRetry)
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
