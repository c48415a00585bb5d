package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestJitter(t *testing.T) {
	t.Parallel()
	const maxDuration = time.Duration(1<<63 - 1)
	for _, tt := range []struct {
		name string
		d    time.Duration
		f    float64
		want time.Duration
	}{
		{"NoCut", time.Second, 0, time.Second},
		{"QuarterCut", time.Second, 0.5, 750 * time.Millisecond},
		{"AlmostHalf", time.Second, 0.999999, 500000500 * time.Nanosecond},
		{"FactorAboveOne", time.Second, 7, 500 * time.Millisecond},
		{"NegativeFactor", time.Second, -1, time.Second},
		{"Zero", 0, 0.7, 0},
		{"Cap", 30 * time.Second, 0.2, 27 * time.Second},
		{"Longest", maxDuration, 0.999999, maxDuration - time.Duration(float64(maxDuration)*0.5*0.999999)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, jitter(tt.d, tt.f))
		})
	}
}

// Every jittered wait lies in (d/2, d] of its unjittered d, and the waits are spread, not one value.
func TestJitteredBackoffBounds(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	for _, tt := range []struct {
		name string
		n    int
		wait func(int) time.Duration
		d    time.Duration
	}{
		{"RoundFirst", 1, c.roundBackoff, roundBackoffDefault},
		{"RoundSecond", 2, c.roundBackoff, 2 * roundBackoffDefault},
		{"RoundCapped", 50, c.roundBackoff, roundBackoffMaxDefault},
		{"RetryFirst", 1, c.retryDelay, retryBackoffDefault},
		{"RetrySecond", 2, c.retryDelay, 2 * retryBackoffDefault},
		{"RetryCapped", 40, c.retryDelay, retryBackoffMaxDefault},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen := map[time.Duration]bool{}
			for range 1000 {
				w := tt.wait(tt.n)
				require.Greater(t, w, tt.d/2, "wait %s", w)
				require.LessOrEqual(t, w, tt.d, "wait %s", w)
				seen[w] = true
			}
			require.Greater(t, len(seen), 100, "1000 waits spread over more than 100 values")
		})
	}
}
