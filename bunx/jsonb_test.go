package bunx_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// model.Event.Validate refuses every payload PostgreSQL's jsonb refuses, so that a payload that passed
// never fails the insert with PostgreSQL's error instead of bunbox's, and refuses no payload for a jsonb
// rule that jsonb does not have.
func TestValidateAgreesWithJSONB(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db := outboxtest.Open(t, nil)
	ctx := context.Background()
	for _, p := range []string{
		`{}`, `null`, `"x"`, `[1, 2.5e10, true, null]`, `{"a": {"b": ["c"]}}`,
		`"\u0000"`, `{"\u0000": 1}`, `"\\u0000"`, `"\\\u0000"`, `"\\\\u0000"`,
		`"\u0001"`, `"\u001f"`, `"\uffff"`, `"\uFFFE"`, `"\u00e9"`, `"é"`, `"😀"`,
		`"\ud83d\ude00"`, `"\ud800"`, `"\udc00"`, `"\ud800\ud800"`, `"\ud800x"`, `"\ud800\u0041"`, `"\udbff\udfff"`,
		`"\ud800\\"`, `"a\"b"`, `"\/"`, "\"\xff\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", `1e400`, `-0`,
		"{\"a\":1,\"a\":2}", " {} ", "\t[]\n",
	} {
		ev := &model.Event{EventID: uuid.New(), Name: "x", Queue: "q", Payload: []byte(p)}
		verr := ev.Validate(0)
		var ok bool
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return tx.NewRaw("SELECT ?::jsonb IS NOT NULL", p).Scan(ctx, &ok)
		})
		if verr == nil {
			require.NoError(t, err, "Validate accepted %q, which jsonb refuses", p)
		} else if err == nil {
			require.ErrorIs(t, verr, model.ErrInvalidEvent)
			require.NotContains(t, verr.Error(), "jsonb refuses", "Validate says jsonb refuses %q, which it takes", p)
			require.NotContains(t, verr.Error(), "surrogate", "Validate refused %q for a surrogate jsonb takes", p)
			// Invalid UTF-8 is refused too, although the insert would pass: bun replaces the invalid bytes
			// of a literal with U+FFFD, so the payload stored would not be the one given.
		}
	}
}
