package model_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// bombJSON is a JSON payload of n bytes that gzip makes about a thousandth of it.
func bombJSON(n int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("a", n-10) + `"}`)
}

// TestCodecMaxDecodedSize: a Codec encodes and decodes payloads up to its limit (MaxDecodedSize, 1 MiB by
// default) and refuses a larger one, whatever it compresses to: Encode with an error naming the limit,
// Decode (a row or task written by a Codec with a higher limit, or around one) with ErrCorruptPayload.
func TestCodecMaxDecodedSize(t *testing.T) {
	t.Parallel()
	ring := testKeyring(t, "k1", map[string][]byte{"k1": testKey(1)})
	id := uuid.New()
	for _, tt := range []struct {
		name string
		opts []model.CodecOption
	}{
		{"Gzip", []model.CodecOption{model.CompressAbove(0)}},
		{"GzipAESGCM", []model.CodecOption{model.CompressAbove(0), model.EncryptWith(ring)}},
		{"AESGCM", []model.CodecOption{model.EncryptWith(ring)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			def := testCodec(t, tt.opts...)
			require.Equal(t, wire.DefaultMaxPayloadSize, def.DecodedLimit())

			atLimit := bombJSON(wire.DefaultMaxPayloadSize)
			data, enc, key, err := def.Encode(id, atLimit)
			require.NoError(t, err, "at the limit")
			plain, err := def.Decode(id, enc, key, data)
			require.NoError(t, err)
			require.Equal(t, atLimit, plain)

			over := bombJSON(wire.DefaultMaxPayloadSize + 1)
			_, _, _, err = def.Encode(id, over)
			require.EqualError(t, err, "model: payload is 1048577 bytes, over the codec's limit of 1048576 (model.MaxDecodedSize)")

			// Written by a Codec that allows more: the default one refuses to decode it.
			wide := testCodec(t, append(tt.opts, model.MaxDecodedSize(8<<20))...)
			require.Equal(t, 8<<20, wide.DecodedLimit())
			bomb := bombJSON(8 << 20)
			data, enc, key, err = wide.Encode(id, bomb)
			require.NoError(t, err)
			if strings.HasPrefix(enc, wire.EncodingGzip) {
				require.Less(t, len(data), 64<<10, "a bomb: small as stored")
			}
			_, err = def.Decode(id, enc, key, data)
			require.ErrorIs(t, err, model.ErrCorruptPayload)
			require.ErrorContains(t, err, "1048576")
			require.ErrorContains(t, err, "model.MaxDecodedSize")
			require.ErrorContains(t, err, id.String())
			plain, err = wide.Decode(id, enc, key, data)
			require.NoError(t, err)
			require.Len(t, plain, 8<<20)
		})
	}
	t.Run("NilCodecDecodesGzipUpToTheDefault", func(t *testing.T) {
		t.Parallel()
		wide := testCodec(t, model.CompressAbove(0), model.MaxDecodedSize(2<<20))
		data, enc, _, err := wide.Encode(id, bombJSON(2<<20))
		require.NoError(t, err)
		var none *model.Codec
		require.Equal(t, wire.DefaultMaxPayloadSize, none.DecodedLimit())
		_, err = none.Decode(id, enc, "", data)
		require.ErrorIs(t, err, model.ErrCorruptPayload)
		require.ErrorContains(t, err, "model.MaxDecodedSize")
	})
	t.Run("Option", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{0, -1, wire.MaxPayloadSizeCeiling + 1} {
			_, err := model.NewCodec(model.MaxDecodedSize(n))
			require.ErrorContains(t, err, "MaxDecodedSize must be between 1 and 67108864 (MaxPayloadSizeCeiling)")
		}
		c := testCodec(t, model.MaxDecodedSize(wire.MaxPayloadSizeCeiling))
		require.Equal(t, "Codec(payloads up to 67108864 bytes)", c.String())
	})
}
