package model_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/model"
)

func TestWithOrderingKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, wantErr string
	}{
		{"Good", "account:42", ""},
		{"Spaces", "tenant 1/account 42", ""},
		{"Longest", strings.Repeat("k", 255), ""},
		{"Empty", "", "OrderingKey must not be empty"},
		{"Control", "a\x00b", "must not contain control characters"},
		{"Newline", "a\nb", "must not contain control characters"},
		{"BadUTF8", "a\xffb", "not valid UTF-8"},
		{"TooLong", strings.Repeat("k", 255+1), "over the limit of 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := model.NewEvent("account.changed", nil, model.WithOrderingKey(tt.key))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.key, ev.OrderingKey)
				return
			}
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			require.ErrorContains(t, err, tt.wantErr)
			require.ErrorContains(t, err, `"account.changed"`, "the error names the event")
		})
	}
	t.Run("NotWithGroup", func(t *testing.T) {
		t.Parallel()
		_, err := model.NewEvent("account.changed", nil, model.WithOrderingKey("a"), model.WithGroup("digest"))
		require.ErrorIs(t, err, model.ErrInvalidEvent)
		require.ErrorContains(t, err, "WithOrderingKey and WithGroup cannot be combined")
	})
	t.Run("ValidateChecksEventsBuiltByHand", func(t *testing.T) {
		t.Parallel()
		ev, err := model.NewEvent("account.changed", nil)
		require.NoError(t, err)
		require.Empty(t, ev.OrderingKey, "no key unless asked")
		ev.OrderingKey = "a\x00b"
		require.ErrorIs(t, ev.Validate(0), model.ErrInvalidEvent)
	})
}
