package relay

import (
	"math/rand/v2"
	"time"
)

// backoff returns base doubled n times, capped at limit; n <= 0 gives base.
func backoff(base, limit time.Duration, n int) time.Duration {
	d := base
	for range max(n, 0) {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// jitterFraction is how much of a backoff jitter may take away: a wait of d becomes a random wait in
// (d/2, d], so that relay replicas that failed together, and rows that failed together, do not all try
// again at the same instant. The cap stays the cap.
const jitterFraction = 0.5

// jitter shortens d by up to jitterFraction of it; f, in [0, 1), says by how much (0: not at all).
func jitter(d time.Duration, f float64) time.Duration {
	return d - time.Duration(float64(d)*jitterFraction*min(max(f, 0), 1))
}

// roundBackoff is the wait after the n-th failed round in a row (n >= 1), with jitter.
func (c Config) roundBackoff(n int) time.Duration {
	return jitter(backoff(c.RoundBackoff, c.RoundBackoffMax, n-1), rand.Float64())
}

// retryDelay is the wait before a row is tried again after its attempts-th failure (attempts >= 1), with
// jitter.
func (c Config) retryDelay(attempts int) time.Duration {
	return jitter(backoff(c.RetryBackoff, c.RetryBackoffMax, attempts-1), rand.Float64())
}

// hotWindow is how long a relay that just saw rows keeps polling at MinPollInterval before its idle
// wait starts doubling towards PollInterval: traffic has gaps, and a gap must not cost a long wait.
const hotWindow = time.Second

// idleWait is the wait after the n-th empty round in a row (n >= 1).
func (c Config) idleWait(n int) time.Duration {
	hot := int(hotWindow / c.MinPollInterval)
	if n <= hot {
		return c.MinPollInterval
	}
	return backoff(c.MinPollInterval, c.PollInterval, n-hot)
}
