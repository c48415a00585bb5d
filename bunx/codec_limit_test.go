package bunx_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// TestRecordRefusesCompressionBomb: with a codec, the payload as written fits the Outbox's payload limit
// however large the JSON is, so the Codec's own limit (model.MaxDecodedSize, 1 MiB by default) is what
// keeps a payload that would decode past it out of the outbox: Record fails, naming the event and the
// limit, and the business change in its transaction fails with it. Up to the limit is written.
func TestRecordRefusesCompressionBomb(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		opts []model.CodecOption
	}{
		{"Compress", []model.CodecOption{model.CompressAbove(256)}},
		{"CompressAndEncrypt", []model.CodecOption{model.CompressAbove(256), model.EncryptWith(keyringForTest(t))}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, bunx.WithLocation(model.Location{Codec: codecForTest(t, tt.opts...)}))
			// 8 MiB of JSON that gzips to about 8 KiB, far under the 1 MiB payload limit as written.
			bomb, err := model.NewEvent("doc.bomb", map[string]string{"pad": strings.Repeat("a", 8<<20)})
			require.NoError(t, err)
			err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.NewInsert().Model(&Order{Ref: "r1"}).Exec(ctx); err != nil {
					return err
				}
				return b.ob.Record(ctx, tx, bomb)
			})
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			require.ErrorContains(t, err, `"doc.bomb"`)
			require.ErrorContains(t, err, "payload is 8388618 bytes, over the codec's limit of 1048576 (model.MaxDecodedSize)")
			b.requireUnchanged(t)

			atLimit, err := model.NewEvent("doc.big", map[string]string{"pad": strings.Repeat("a", wire.DefaultMaxPayloadSize-10)})
			require.NoError(t, err)
			require.NoError(t, b.ob.Record(ctx, b.db, atLimit))
			require.Equal(t, []string{"doc.big"}, b.eventNames(t))
		})
	}
}
