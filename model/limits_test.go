package model_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// ValidateMetadata applies Validate's metadata limits alone, with the same error, so that what bunx adds
// after Validate (the trace context) is held to the limits the relay applies to the row.
func TestValidateMetadata(t *testing.T) {
	t.Parallel()
	keys := func(n int) map[string]string {
		md := make(map[string]string, n)
		for i := range n {
			md[fmt.Sprintf("k%d", i)] = "v"
		}
		return md
	}
	cases := map[string]struct {
		md   map[string]string
		want string
	}{
		"None":          {md: nil},
		"AtTheCount":    {md: keys(wire.MaxMetadataCount)},
		"OverTheCount":  {md: keys(wire.MaxMetadataCount + 1), want: "MaxMetadataCount"},
		"LongValue":     {md: map[string]string{"baggage": strings.Repeat("b", 7012)}, want: `Metadata value of "baggage" is 7012 bytes`},
		"ValueAtLimit":  {md: map[string]string{"k": strings.Repeat("b", wire.MaxMetadataValueLength)}},
		"TooManyBytes":  {md: map[string]string{"a": strings.Repeat("a", 4000), "b": strings.Repeat("b", 4000), "c": strings.Repeat("c", 4000), "d": strings.Repeat("d", 4000), "e": strings.Repeat("e", 1000)}, want: "MaxMetadataSize"},
		"NULInAValue":   {md: map[string]string{"k": "a\x00b"}, want: "NUL"},
		"EmptyKeyFails": {md: map[string]string{"": "v"}, want: "must not be empty"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := model.NewEvent("md.checked", nil)
			require.NoError(t, err)
			ev.Metadata = tc.md
			err = ev.ValidateMetadata()
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, ev.Validate(0))
				return
			}
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			require.ErrorContains(t, err, tc.want)
			require.EqualError(t, ev.Validate(0), err.Error(), "the same error as Validate")
		})
	}
	var nilEvent *model.Event
	require.ErrorIs(t, nilEvent.ValidateMetadata(), model.ErrInvalidEvent)
}
