package bunx_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

func codecForTest(t *testing.T, opts ...model.CodecOption) *model.Codec {
	t.Helper()
	c, err := model.NewCodec(opts...)
	require.NoError(t, err)
	return c
}

func keyringForTest(t *testing.T) *model.Keyring {
	t.Helper()
	k, err := model.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	require.NoError(t, err)
	return k
}

// TestRecordWithCodec writes events through Outboxes with codecs: each encoded payload is stored as bytes
// with its encoding (and key id) in the metadata and JSON null in the payload column, decodes to what the
// caller gave, and the caller's events keep their payload and metadata and get their id. A payload the
// codec leaves alone stays plain, queryable JSON.
func TestRecordWithCodec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	big := map[string]string{"text": strings.Repeat("a compressible sentence. ", 100)}
	for _, tt := range []struct {
		name      string
		opts      []model.CodecOption
		encodings []string // of the big and the small event
	}{
		{"Compress", []model.CodecOption{model.CompressAbove(256)}, []string{"gzip", ""}},
		{"Encrypt", []model.CodecOption{model.EncryptWith(keyringForTest(t))}, []string{"aes-gcm", "aes-gcm"}},
		{"CompressAndEncrypt", []model.CodecOption{model.CompressAbove(256), model.EncryptWith(keyringForTest(t))}, []string{"gzip+aes-gcm", "aes-gcm"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := codecForTest(t, tt.opts...)
			b := setup(t, bunx.WithLocation(model.Location{Codec: c}))
			bigEv, err := model.NewEvent("doc.saved", big, model.WithMetadata("tenant", "t1"))
			require.NoError(t, err)
			smallEv, err := model.NewEvent("doc.small", map[string]int{"n": 1})
			require.NoError(t, err)
			bigPayload := bytes.Clone(bigEv.Payload)
			require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				return b.ob.Record(ctx, tx, bigEv, smallEv)
			}))
			require.NotZero(t, bigEv.ID, "the caller's event got its id")
			require.NotZero(t, smallEv.ID)
			require.False(t, bigEv.CreatedAt.IsZero())
			require.Equal(t, bigPayload, []byte(bigEv.Payload), "the caller's payload is not changed")
			require.Equal(t, map[string]string{"tenant": "t1"}, bigEv.Metadata, "nor its metadata")

			rows := b.events(t)
			require.Len(t, rows, 2)
			for i, want := range [][]byte{bigPayload, smallEv.Payload} {
				row := rows[i]
				require.Equal(t, tt.encodings[i], row.Metadata[wire.HeaderPayloadEncoding], "row %d", i)
				if tt.encodings[i] == "" {
					require.Nil(t, row.PayloadEncoded)
					require.JSONEq(t, string(want), string(row.Payload))
					continue
				}
				require.JSONEq(t, "null", string(row.Payload))
				require.NotEmpty(t, row.PayloadEncoded)
				if strings.HasSuffix(tt.encodings[i], "aes-gcm") {
					require.Equal(t, "k1", row.Metadata[wire.HeaderPayloadKeyID])
				}
				require.NoError(t, c.DecodeEvent(&row))
				require.JSONEq(t, string(want), string(row.Payload))
			}
			require.Equal(t, "t1", rows[0].Metadata["tenant"])
			// The plain JSON of the default path stays queryable; encoded rows are found by their encoding.
			require.EqualValues(t, len(tt.encodings)-countNonEmpty(tt.encodings), outboxtest.Count(t, b.db, "outbox_events", "payload ? 'n'"))
			require.EqualValues(t, countNonEmpty(tt.encodings), outboxtest.Count(t, b.db, "outbox_events", "metadata ? 'bunbox-payload-encoding'"))
		})
	}
}

func countNonEmpty(s []string) int {
	n := 0
	for _, v := range s {
		if v != "" {
			n++
		}
	}
	return n
}

// TestHooksWriteWithCodec: the events of model hooks are encoded like Record's.
func TestHooksWriteWithCodec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, bunx.WithLocation(model.Location{Codec: codecForTest(t, model.EncryptWith(keyringForTest(t)))}))
	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&Order{Ref: "r1"}).Exec(ctx)
		return err
	}))
	rows := b.events(t)
	require.Len(t, rows, 1)
	require.Equal(t, "aes-gcm", rows[0].Metadata[wire.HeaderPayloadEncoding])
	require.NotContains(t, string(rows[0].PayloadEncoded), "r1", "the payload is encrypted at rest")
}

// TestRecordWithCodecRollsBack: an encoded event commits and rolls back with the business change.
func TestRecordWithCodecRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, bunx.WithLocation(model.Location{Codec: codecForTest(t, model.CompressAbove(0), model.EncryptWith(keyringForTest(t)))}))
	ev, err := model.NewEvent("x", map[string]string{"email": "alice@example.com"})
	require.NoError(t, err)
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&Order{Ref: "r1"}).Exec(ctx); err != nil {
			return err
		}
		if err := b.ob.Record(ctx, tx, ev); err != nil {
			return err
		}
		return errBusiness
	})
	require.ErrorIs(t, err, errBusiness)
	b.requireUnchanged(t)
}

// TestRecordWithCodecRefuses: what the codec cannot write fails the call, with an error naming it, and
// nothing is written.
func TestRecordWithCodecRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, bunx.WithLocation(model.Location{Codec: codecForTest(t, model.CompressAbove(64), model.EncryptWith(keyringForTest(t)))}),
		bunx.WithMaxPayloadSize(100))

	// 81 bytes of JSON that gzip does not shrink are 109 encrypted (nonce and tag): over the limit of what
	// is written.
	ev, err := model.NewEvent("x", map[string]string{"k": uuid.NewString() + uuid.NewString()[:36]})
	require.NoError(t, err)
	err = b.ob.Record(ctx, b.db, ev)
	require.ErrorIs(t, err, model.ErrInvalidEvent)
	require.ErrorContains(t, err, "after encoding (aes-gcm), over the limit of 100")

	// With a codec the JSON before encoding may be larger than the limit, if what is written fits.
	big, err := model.NewEvent("big", map[string]string{"text": strings.Repeat("a", 10_000)})
	require.NoError(t, err)
	require.NoError(t, b.ob.Record(ctx, b.db, big))

	reserved, err := model.NewEvent("x", nil, model.WithMetadata(wire.HeaderPayloadEncoding, "gzip"))
	require.NoError(t, err)
	require.ErrorContains(t, b.ob.Record(ctx, b.db, reserved), "Metadata key bunbox-payload-encoding is set by the Outbox's codec")

	preset, err := model.NewEvent("x", nil)
	require.NoError(t, err)
	preset.PayloadEncoded = []byte{1}
	require.ErrorContains(t, b.ob.Record(ctx, b.db, preset), "PayloadEncoded is set by the Outbox's codec")

	crowded := make([]model.Option, 0, wire.MaxMetadataCount)
	for i := range wire.MaxMetadataCount {
		crowded = append(crowded, model.WithMetadata(strings.Repeat("m", i+1), "v"))
	}
	full, err := model.NewEvent("x", nil, crowded...)
	require.NoError(t, err)
	require.ErrorContains(t, b.ob.Record(ctx, b.db, full), "with the payload codec's metadata keys")

	require.Equal(t, []string{"big"}, b.eventNames(t))
}
