package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
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

// cliKey is the key of the keyring files of these tests; no output may show it, its base64 or its hex.
var cliKey = bytes.Repeat([]byte{0x5c, 0xa7}, 16)

// requireNoCLIKey fails when s shows cliKey in any spelling, or a long enough piece of its base64.
func requireNoCLIKey(t *testing.T, s string) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString(cliKey)
	for _, k := range []string{string(cliKey), hex.EncodeToString(cliKey), b64, strings.TrimRight(b64, "="), b64[:16], b64[16:32]} {
		require.NotContains(t, s, k)
	}
}

// writeKeysFile writes a keyring file with text and returns its path.
func writeKeysFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codec-keys")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestRelayCommandDecodesWithKeyringFile runs `bunbox relay -codec-keys-file`: an encrypted and compressed
// JSON event and an encrypted event of bytes reach asynq decoded (the plain payload, exactly the bytes,
// no encoding headers); the relay logs the key ids it holds, and nothing it prints shows the key.
func TestRelayCommandDecodesWithKeyringFile(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	env, db := schemaEnv(t)
	queue := outboxtest.RandomName("cli_codec_")
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	t.Cleanup(func() { _ = ins.DeleteQueue(queue, true); _ = ins.Close() })

	ring, err := model.NewKeyring("2026-12", map[string][]byte{"2026-12": cliKey})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.CompressAbove(64), model.EncryptWith(ring))
	require.NoError(t, err)
	doc, err := model.NewEvent("user.registered", map[string]string{"email": "alice@example.com", "bio": strings.Repeat("x", 200)},
		model.WithQueue(queue))
	require.NoError(t, err)
	data := append([]byte{0, 0xff, 0xfe, 0}, bytes.Repeat([]byte{0, 0x80}, 100)...)
	bin, err := model.NewBytesEvent("blob.saved", data, model.WithQueue(queue))
	require.NoError(t, err)
	require.NoError(t, bunx.New(db, bunx.WithLocation(model.Location{Codec: codec})).Record(ctx, db, doc, bin))
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "metadata->>'bunbox-payload-key-id' = '2026-12'"))

	path := writeKeysFile(t, "# the relay's keys\ncurrent=2026-12\n2026-11="+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))+
		"\n2026-12="+base64.StdEncoding.EncodeToString(cliKey)+"\n")
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"relay", "-metrics-addr", "", "-reconcile=false", "-codec-keys-file", path},
			getenvOf(t, env), &stdout, &stderr)
	}()
	outboxtest.WaitFor(t, 30*time.Second, "both events published", func() bool {
		return outboxtest.CountDelivered(t, db, "") == 2
	})
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop within 30s")
	}

	ti, err := ins.GetTaskInfo(queue, doc.EventID.String())
	require.NoError(t, err)
	require.JSONEq(t, string(doc.Payload), string(ti.Payload), "decoded before the enqueue")
	require.NotContains(t, ti.Headers, wire.HeaderPayloadEncoding)
	require.NotContains(t, ti.Headers, wire.HeaderPayloadKeyID)
	ti, err = ins.GetTaskInfo(queue, bin.EventID.String())
	require.NoError(t, err)
	require.Equal(t, data, ti.Payload, "exactly the bytes")
	require.Equal(t, wire.PayloadFormatBytes, ti.Headers[wire.HeaderPayloadFormat])

	out := stdout.String() + stderr.String()
	require.Contains(t, out, "Keyring(current 2026-12; ids 2026-11, 2026-12)", "the relay says which key ids it decodes with")
	requireNoCLIKey(t, out)
	require.NotContains(t, out, "alice@example.com")
}

// TestRelayCommandRefusesBadKeyringFiles: a keyring file that cannot be read or holds a bad line stops
// `bunbox relay` at startup, before it connects, with an error naming the flag, the file and the line;
// no output shows a key. The variable OUTBOX_CODEC_KEYS_FILE is read by relayenv.Config, whose test
// covers it.
func TestRelayCommandRefusesBadKeyringFiles(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString(cliKey)
	for _, tt := range []struct {
		name, text, msg string
	}{
		{"Missing", "", "no such file"},
		{"BadBase64", "current=k1\nk1=" + b64[:20] + "*" + b64[21:] + "\n", "line 2: the key is not standard base64"},
		{"WrongLength", "current=k1\nk1=" + base64.StdEncoding.EncodeToString(cliKey[:20]) + "\n", "line 2: the key is 20 bytes"},
		{"UnknownCurrent", "current=k2\nk1=" + b64 + "\n", "line 1: the current key id is not among the key ids of the file (k1;"},
		{"BareKey", "current=k1\n" + b64 + "\n", `line 2: nothing after "="`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "missing")
			if tt.name != "Missing" {
				path = writeKeysFile(t, tt.text)
			}
			env := map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/db?sslmode=disable", "REDIS_ADDR": "127.0.0.1:1"}
			code, stdout, stderr := runCLI(t, env, "relay", "-metrics-addr", "", "-codec-keys-file", path)
			require.Equal(t, 1, code, stderr)
			require.Contains(t, stderr, "-codec-keys-file")
			require.Contains(t, stderr, path)
			require.Contains(t, stderr, tt.msg)
			require.NotContains(t, stderr, "cannot connect", "refused before it connects")
			requireNoCLIKey(t, stdout+stderr)
		})
	}
}
