package bunx_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// blob is bytes that are not JSON: NUL bytes, invalid UTF-8, a \u0000 escape, and a compressible run.
func blob() []byte {
	b := []byte{0, 0xff, 0xfe, 0xc3, 0x28, '"', '\\', 'u', '0', '0', '0', '0', '"', 0}
	return append(b, bytes.Repeat([]byte{0, 0x80, 'x'}, 200)...)
}

// TestRecordBytes writes events of bytes (model.NewBytesEvent) in the business transaction, with and
// without a codec: the bytes go to payload_encoded (as they are, or encoded), the jsonb payload column
// holds null, the metadata keeps the bytes marker; a JSON event beside them stays plain JSON; the caller's
// events are not changed and get their ids. It runs with prepared statements too.
func TestRecordBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		opts     []bunx.Option
		encoding string // of the bytes row; "" stored as they are
	}{
		{"NoCodec", nil, ""},
		{"NoCodecPrepared", []bunx.Option{bunx.WithPreparedStatements()}, ""},
		{"CompressBelowThreshold", []bunx.Option{bunx.WithLocation(model.Location{Codec: codecForTest(t, model.CompressAbove(10_000))})}, ""},
		{"Compress", []bunx.Option{bunx.WithLocation(model.Location{Codec: codecForTest(t, model.CompressAbove(64))})}, "gzip"},
		{"CompressAndEncrypt", []bunx.Option{bunx.WithLocation(model.Location{Codec: codecForTest(t, model.CompressAbove(64), model.EncryptWith(keyringForTest(t)))})}, "gzip+aes-gcm"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.name == "NoCodecPrepared" {
				outboxtest.SkipPooled(t, "prepared statements are not for a transaction pooler")
			}
			b := setup(t, tt.opts...)
			data := blob()
			bin, err := model.NewBytesEvent("blob.saved", data, model.WithMetadata("tenant", "t1"))
			require.NoError(t, err)
			doc, err := model.NewEvent("doc.saved", map[string]int{"n": 1})
			require.NoError(t, err)
			require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.NewInsert().Model(&Order{Ref: "r1"}).Exec(ctx); err != nil {
					return err
				}
				return b.ob.Record(ctx, tx, bin, doc)
			}))
			require.NotZero(t, bin.ID)
			require.Equal(t, data, []byte(bin.Payload), "the caller's event is not changed")
			require.Nil(t, bin.PayloadEncoded)

			rows := b.events(t)
			require.Len(t, rows, 3) // order.placed of the hook, then the two
			row := rows[1]
			require.Equal(t, "blob.saved", row.Name)
			require.JSONEq(t, "null", string(row.Payload), "the jsonb column holds null")
			require.Equal(t, wire.PayloadFormatBytes, row.Metadata[wire.HeaderPayloadFormat])
			require.Equal(t, "t1", row.Metadata["tenant"])
			require.Equal(t, tt.encoding, row.Metadata[wire.HeaderPayloadEncoding])
			if tt.encoding == "" {
				require.Equal(t, data, row.PayloadEncoded, "stored as they are")
			} else {
				require.NotEqual(t, data, row.PayloadEncoded)
				require.Less(t, len(row.PayloadEncoded), len(data), "compressed")
			}
			decoder := codecForTest(t, model.EncryptWith(keyringForTest(t)))
			require.NoError(t, decoder.DecodeEvent(&row))
			require.Equal(t, data, []byte(row.Payload))
			require.Equal(t, tt.name == "CompressAndEncrypt", rows[2].PayloadEncoded != nil, "the JSON event is encrypted only when every payload is")
			require.NoError(t, decoder.DecodeEvent(&rows[2]))
			require.JSONEq(t, `{"n":1}`, string(rows[2].Payload))
			require.EqualValues(t, 1, outboxtest.Count(t, b.db, "outbox_events", "metadata->>'bunbox-payload-format' = 'bytes'"))
		})
	}
}

// TestRecordBytesLimits: the payload limit counts the bytes (as written: after encoding with a codec); a
// PayloadEncoded set by the caller is refused without a codec too. Nothing is written.
func TestRecordBytesLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, bunx.WithMaxPayloadSize(100))
	ev, err := model.NewBytesEvent("blob", make([]byte, 101))
	require.NoError(t, err)
	err = b.ob.Record(ctx, b.db, ev)
	require.ErrorIs(t, err, model.ErrInvalidEvent)
	require.ErrorContains(t, err, `"blob": Payload is 101 bytes, over the limit of 100`)
	ev, err = model.NewBytesEvent("fits", make([]byte, 100))
	require.NoError(t, err)
	require.NoError(t, b.ob.Record(ctx, b.db, ev))

	preset, err := model.NewEvent("x", nil)
	require.NoError(t, err)
	preset.PayloadEncoded = []byte{1}
	require.ErrorContains(t, b.ob.Record(ctx, b.db, preset), "PayloadEncoded is set by the Outbox's codec")

	enc := setup(t, bunx.WithMaxPayloadSize(100), bunx.WithLocation(model.Location{Codec: codecForTest(t, model.CompressAbove(64), model.EncryptWith(keyringForTest(t)))}))
	random := make([]byte, 90) // gzip does not shrink it; encrypted it is 118 bytes
	_, _ = rand.Read(random)
	ev, err = model.NewBytesEvent("random", random)
	require.NoError(t, err)
	err = enc.ob.Record(ctx, enc.db, ev)
	require.ErrorIs(t, err, model.ErrInvalidEvent)
	require.ErrorContains(t, err, `"random": Payload is 118 bytes after encoding (aes-gcm), over the limit of 100`)
	// Bytes larger than the limit that compress below it are written.
	ev, err = model.NewBytesEvent("zeros", make([]byte, 10_000))
	require.NoError(t, err)
	require.NoError(t, enc.ob.Record(ctx, enc.db, ev))

	require.Equal(t, []string{"fits"}, b.eventNames(t))
	require.Equal(t, []string{"zeros"}, enc.eventNames(t))
}
