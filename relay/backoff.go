package relay

import "time"

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

// roundBackoff is the wait after the n-th failed round in a row (n >= 1).
func (c Config) roundBackoff(n int) time.Duration { return backoff(c.Backoff, c.BackoffMax, n-1) }

// retryDelay is the wait before a row is tried again after its attempts-th failure (attempts >= 1).
func (c Config) retryDelay(attempts int) time.Duration {
	return backoff(c.RetryBackoff, c.RetryBackoffMax, attempts-1)
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
