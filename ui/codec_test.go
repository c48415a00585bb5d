package ui_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/ui"
)

// TestEncodedPayloadIsDescribed: the page shows an encrypted payload (a Location with a Codec, bunx.WithLocation) as "encrypted (key
// id …)" with its size, never its bytes or the key.
func TestEncodedPayloadIsDescribed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	key := bytes.Repeat([]byte{0x5a}, 32)
	ring, err := model.NewKeyring("2026-12", map[string][]byte{"2026-12": key})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.EncryptWith(ring))
	require.NoError(t, err)
	ev, err := model.NewEvent("user.registered", map[string]string{"email": "alice@example.com"})
	require.NoError(t, err)
	require.NoError(t, bunx.New(f.db, bunx.WithLocation(model.Location{Codec: codec})).Record(context.Background(), f.db, ev))

	resp, body := f.client(t).get("/event?id=" + ev.EventID.String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "encrypted (key id 2026-12), ")
	require.NotContains(t, body, "alice@example.com")
	require.NotContains(t, body, hex.EncodeToString(key))
	require.NotContains(t, body, string(key))
}

// TestBytesPayloadIsDescribed: the page shows the payload of an event of bytes (model.NewBytesEvent) as
// "bytes (not JSON), N bytes", with a codec or without, never the bytes as text.
func TestBytesPayloadIsDescribed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	data := append([]byte("<b>MARKER</b>\x00\xff\xfe"), bytes.Repeat([]byte{0, 0x80}, 100)...)
	plain, err := model.NewBytesEvent("blob.saved", data)
	require.NoError(t, err)
	require.NoError(t, bunx.New(f.db).Record(context.Background(), f.db, plain))
	ring, err := model.NewKeyring("2026-12", map[string][]byte{"2026-12": bytes.Repeat([]byte{0x5a}, 32)})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.EncryptWith(ring))
	require.NoError(t, err)
	encrypted, err := model.NewBytesEvent("blob.saved", data)
	require.NoError(t, err)
	require.NoError(t, bunx.New(f.db, bunx.WithLocation(model.Location{Codec: codec})).Record(context.Background(), f.db, encrypted))

	for id, want := range map[string]string{
		plain.EventID.String():     "bytes (not JSON), 216 bytes",
		encrypted.EventID.String(): "bytes (not JSON), encrypted (key id 2026-12), 244 bytes",
	} {
		resp, body := f.client(t).get("/event?id=" + id)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, want)
		require.NotContains(t, body, "MARKER")
		require.NotContains(t, body, "\x00")
		require.NotContains(t, body, "\ufffd", "no bytes shown as text")
	}
}
