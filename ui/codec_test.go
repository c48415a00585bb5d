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

// TestEncodedPayloadIsDescribed: the page shows an encrypted payload (bunx.WithCodec) as "encrypted (key
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
	require.NoError(t, bunx.New(f.db, bunx.WithCodec(codec)).Record(context.Background(), f.db, ev))

	resp, body := f.client(t).get("/event?id=" + ev.EventID.String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "encrypted (key id 2026-12), ")
	require.NotContains(t, body, "alice@example.com")
	require.NotContains(t, body, hex.EncodeToString(key))
	require.NotContains(t, body, string(key))
}
