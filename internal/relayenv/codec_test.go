package relayenv

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// envTestKey is the key of keysFile's file, which no error may show.
var envTestKey = bytes.Repeat([]byte{0x6b}, 32)

// keysFile writes a keyring file holding envTestKey as "k1", current, and returns its path.
func keysFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codec-keys")
	require.NoError(t, os.WriteFile(path, []byte("current=k1\nk1="+base64.StdEncoding.EncodeToString(envTestKey)+"\n"), 0o600))
	return path
}

// TestConfigCodecKeysFile: OUTBOX_CODEC_KEYS_FILE gives Config.Codec, which decodes what the key
// encrypted; a bad file is refused naming the variable, the file and the line, never the key.
func TestConfigCodecKeysFile(t *testing.T) {
	t.Parallel()
	path := keysFile(t)
	c, err := configFromLookup(func(k string) (string, bool) { return path, k == CodecKeysFileEnv })
	require.NoError(t, err)
	require.NotNil(t, c.Location.Codec)
	require.Equal(t, "k1", c.Location.Codec.Keyring().Current())

	ring, err := model.NewKeyring("k1", map[string][]byte{"k1": envTestKey})
	require.NoError(t, err)
	writer, err := model.NewCodec(model.CompressAbove(0), model.EncryptWith(ring))
	require.NoError(t, err)
	ev, err := model.NewEvent("doc.saved", map[string]string{"a": "b"})
	require.NoError(t, err)
	data, encoding, keyID, err := writer.Encode(ev.EventID, ev.Payload)
	require.NoError(t, err)
	plain, err := c.Location.Codec.Decode(ev.EventID, encoding, keyID, data)
	require.NoError(t, err)
	require.JSONEq(t, string(ev.Payload), string(plain))

	b64 := base64.StdEncoding.EncodeToString(envTestKey)
	bad := filepath.Join(t.TempDir(), "bad-keys")
	require.NoError(t, os.WriteFile(bad, []byte("current=k1\nk1="+b64[:40]+"\n"), 0o600))
	for _, p := range []string{bad, bad + ".missing"} {
		_, err = configFromLookup(func(k string) (string, bool) { return p, k == CodecKeysFileEnv })
		require.ErrorIs(t, err, relay.ErrInvalidConfig)
		require.ErrorContains(t, err, "OUTBOX_CODEC_KEYS_FILE")
		require.ErrorContains(t, err, p)
		require.NotContains(t, err.Error(), b64[:40])
		require.NotContains(t, err.Error(), string(envTestKey))
	}
	require.ErrorContains(t, err, "no such file")
}

// OUTBOX_CODEC_MAX_DECODED_SIZE gives the keyring file's Codec its limit on a decoded payload (the 1 MiB
// default when unset); a value that is not a positive number is refused naming the variable.
func TestConfigCodecMaxDecoded(t *testing.T) {
	t.Parallel()
	path := keysFile(t)
	env := func(limit string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			switch k {
			case CodecKeysFileEnv:
				return path, true
			case CodecMaxDecodedEnv:
				return limit, limit != ""
			}
			return "", false
		}
	}
	c, err := configFromLookup(env(""))
	require.NoError(t, err)
	require.Equal(t, wire.DefaultMaxPayloadSize, c.Location.Codec.DecodedLimit())
	c, err = configFromLookup(env("4194304"))
	require.NoError(t, err)
	require.Equal(t, 4<<20, c.Location.Codec.DecodedLimit())
	for _, bad := range []string{"4 MiB", "0", "-1"} {
		_, err = configFromLookup(env(bad))
		require.ErrorIs(t, err, relay.ErrInvalidConfig)
		require.ErrorContains(t, err, CodecMaxDecodedEnv)
	}
}
