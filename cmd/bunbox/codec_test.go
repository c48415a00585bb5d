package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestDeadListDescribesEncodedPayloads: `dead list -json` shows a dead encrypted event's payload as
// "encrypted (key id …)", and its last_error names the key id; never the bytes or the key.
func TestDeadListDescribesEncodedPayloads(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	env, db := schemaEnv(t)
	key := bytes.Repeat([]byte{0x33}, 32)
	ring, err := model.NewKeyring("k1", map[string][]byte{"k1": key})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.EncryptWith(ring))
	require.NoError(t, err)
	ev, err := model.NewEvent("user.registered", map[string]string{"email": "alice@example.com"})
	require.NoError(t, err)
	require.NoError(t, bunx.New(db, bunx.WithLocation(model.Location{Codec: codec})).Record(ctx, db, ev))
	_, err = db.ExecContext(ctx, `UPDATE outbox_events SET published_at = NULL, dead_at = now(), attempts = 1, last_error = ? WHERE event_id = ?`,
		`bunbox: malformed outbox row: payload encrypted with a key id the keyring does not hold (key id "k1")`, ev.EventID)
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, env, "dead", "list", "-json")
	require.Equal(t, 0, code, stderr)
	var evs []deadEventJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &evs))
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].Payload, "encrypted (key id k1), ")
	require.NotContains(t, stdout, "alice@example.com")
	require.NotContains(t, stdout, hex.EncodeToString(key))
}

// TestDeadListDescribesBytesPayloads: `dead list -json` shows a dead event of bytes (model.NewBytesEvent)
// as "bytes (not JSON), N bytes", never its bytes as text; `dead list` and `status` print it like any row.
func TestDeadListDescribesBytesPayloads(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	env, db := schemaEnv(t)
	data := append([]byte("MARKER\x00\xff\xfe"), bytes.Repeat([]byte{0, 0x80}, 50)...)
	ev, err := model.NewBytesEvent("blob.saved", data)
	require.NoError(t, err)
	require.NoError(t, bunx.New(db).Record(ctx, db, ev))
	_, err = db.ExecContext(ctx, `UPDATE outbox_events SET published_at = NULL, dead_at = now(), attempts = 1, last_error = 'boom' WHERE event_id = ?`, ev.EventID)
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, env, "dead", "list", "-json")
	require.Equal(t, 0, code, stderr)
	var evs []deadEventJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &evs))
	require.Len(t, evs, 1)
	require.Equal(t, "bytes (not JSON), 109 bytes", evs[0].Payload)
	for _, args := range [][]string{{"dead", "list", "-json"}, {"dead", "list"}, {"status", "-asynq=false"}, {"status", "-json", "-asynq=false"}} {
		code, stdout, stderr := runCLI(t, env, args...)
		require.Equal(t, 0, code, stderr)
		require.NotContains(t, stdout, "MARKER", args)
		require.NotContains(t, stdout, "\x00", args)
	}
}
