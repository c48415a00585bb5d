// Package relayenv reads a relay's settings from the environment, as `bunbox relay` and the example's
// processes take them: OUTBOX_* variables for relay.Config, OUTBOX_REDIS_URL for Redis, and a keyring
// file for the payload codec. It is bunbox's own plumbing; a service that embeds a relay builds its
// relay.Config in code.
package relayenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// Config reads a relay.Config from the OUTBOX_* environment variables; unset variables keep the zero
// value, so New applies the default. Durations use Go's syntax ("250ms", "24h"). A value that does not
// parse gives an error naming the variable:
//
//	OUTBOX_BATCH_SIZE, OUTBOX_BATCH_BYTES, OUTBOX_CONCURRENCY, OUTBOX_WORKERS, OUTBOX_POLL_INTERVAL, OUTBOX_MIN_POLL_INTERVAL,
//	OUTBOX_DISABLE_NOTIFY, OUTBOX_TASK_RETENTION, OUTBOX_MAX_ATTEMPTS, OUTBOX_RETRY_BACKOFF,
//	OUTBOX_RETRY_BACKOFF_MAX, OUTBOX_ROUND_BACKOFF, OUTBOX_ROUND_BACKOFF_MAX, OUTBOX_UNREADY_AFTER, OUTBOX_ENQUEUE_TIMEOUT,
//	OUTBOX_PUBLISHED_RETENTION, OUTBOX_CLEANUP_INTERVAL, OUTBOX_CLEANUP_BATCH_SIZE, OUTBOX_KEY_CHECK_INTERVAL,
//	OUTBOX_SCHEMA, OUTBOX_TABLE_PREFIX, OUTBOX_PREPARED_STATEMENTS, OUTBOX_LISTEN_URL (a direct PostgreSQL connection for LISTEN; see Config.ListenURL)
//	OUTBOX_IDLE_IN_TRANSACTION_TIMEOUT, OUTBOX_STATEMENT_TIMEOUT, OUTBOX_LOCK_TIMEOUT
//
// and OUTBOX_ROUTES for Config.Routes, as "event=listener,listener;event=listener"
// (e.g. "order.placed=send-confirmation,reserve-stock"); OUTBOX_QUEUES for Config.Queues, as
// "queue:weight,queue:weight" (e.g. "critical:6,default:3,bulk:1"), OUTBOX_STRICT_PRIORITY,
// OUTBOX_CANCEL_CHECK_INTERVAL and OUTBOX_WAKE_INTERVAL (Config.WakeInterval; "-1ms" turns the wake-up
// off); OUTBOX_CODEC_KEYS_FILE for Config.Codec, the path of a keyring file, and
// OUTBOX_CODEC_MAX_DECODED_SIZE for its limit on a decoded payload (see CodecFromKeysFile; never
// the keys themselves). The Redis to relay to is not in Config: Redis reads it from OUTBOX_REDIS_URL.
// The fields that hold Go values (Logger, Enqueuer, Observer, TracerProvider, Inspector) and the
// reconciler's (DisableReconciler, Reconciler; flags of `bunbox relay`) have no variable.
func Config() (relay.Config, error) { return configFromLookup(os.LookupEnv) }

func configFromLookup(lookup func(string) (string, bool)) (relay.Config, error) {
	var c relay.Config
	ints := []struct {
		name string
		dst  *int
	}{
		{"OUTBOX_BATCH_SIZE", &c.BatchSize},
		{"OUTBOX_CONCURRENCY", &c.Concurrency},
		{"OUTBOX_WORKERS", &c.Workers},
		{"OUTBOX_MAX_ATTEMPTS", &c.MaxAttempts},
		{"OUTBOX_CLEANUP_BATCH_SIZE", &c.CleanupBatchSize},
	}
	for _, v := range ints {
		if s, ok := lookup(v.name); ok && s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return relay.Config{}, fmt.Errorf("%w: %s=%q is not an integer", relay.ErrInvalidConfig, v.name, s)
			}
			*v.dst = n
		}
	}
	if s, ok := lookup("OUTBOX_BATCH_BYTES"); ok && s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return relay.Config{}, fmt.Errorf("%w: OUTBOX_BATCH_BYTES=%q is not an integer", relay.ErrInvalidConfig, s)
		}
		c.BatchBytes = n
	}
	durations := []struct {
		name string
		dst  *time.Duration
	}{
		{"OUTBOX_POLL_INTERVAL", &c.PollInterval},
		{"OUTBOX_MIN_POLL_INTERVAL", &c.MinPollInterval},
		{"OUTBOX_TASK_RETENTION", &c.TaskRetention},
		{"OUTBOX_RETRY_BACKOFF", &c.RetryBackoff},
		{"OUTBOX_RETRY_BACKOFF_MAX", &c.RetryBackoffMax},
		{"OUTBOX_ROUND_BACKOFF", &c.RoundBackoff},
		{"OUTBOX_ROUND_BACKOFF_MAX", &c.RoundBackoffMax},
		{"OUTBOX_UNREADY_AFTER", &c.UnreadyAfter},
		{"OUTBOX_ENQUEUE_TIMEOUT", &c.EnqueueTimeout},
		{"OUTBOX_PUBLISHED_RETENTION", &c.PublishedRetention},
		{"OUTBOX_CLEANUP_INTERVAL", &c.CleanupInterval},
		{"OUTBOX_KEY_CHECK_INTERVAL", &c.KeyCheckInterval},
		{"OUTBOX_IDLE_IN_TRANSACTION_TIMEOUT", &c.IdleInTransactionTimeout},
		{"OUTBOX_STATEMENT_TIMEOUT", &c.StatementTimeout},
		{"OUTBOX_LOCK_TIMEOUT", &c.LockTimeout},
		{"OUTBOX_WAKE_INTERVAL", &c.WakeInterval},
	}
	for _, v := range durations {
		if s, ok := lookup(v.name); ok && s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return relay.Config{}, fmt.Errorf("%w: %s=%q is not a duration like 500ms or 24h", relay.ErrInvalidConfig, v.name, s)
			}
			*v.dst = d
		}
	}
	if s, ok := lookup("OUTBOX_DISABLE_NOTIFY"); ok && s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return relay.Config{}, fmt.Errorf("%w: OUTBOX_DISABLE_NOTIFY=%q is not a boolean", relay.ErrInvalidConfig, s)
		}
		c.DisableNotify = b
	}
	if s, ok := lookup("OUTBOX_PREPARED_STATEMENTS"); ok && s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return relay.Config{}, fmt.Errorf("%w: OUTBOX_PREPARED_STATEMENTS=%q is not a boolean", relay.ErrInvalidConfig, s)
		}
		c.PreparedStatements = b
	}
	// A connection string: never echoed in an error (it may carry a password); Config.validate reads it.
	if s, ok := lookup("OUTBOX_LISTEN_URL"); ok {
		c.ListenURL = strings.TrimSpace(s)
	}
	if s, ok := lookup("OUTBOX_SCHEMA"); ok {
		c.Location.Schema = strings.TrimSpace(s) // validated by New, which names a bad value
	}
	if s, ok := lookup("OUTBOX_TABLE_PREFIX"); ok {
		c.Location.TablePrefix = strings.TrimSpace(s) // validated by New, which names a bad value
	}
	if s, ok := lookup("OUTBOX_ROUTES"); ok && s != "" {
		routes, err := parseRoutes(s)
		if err != nil {
			return relay.Config{}, fmt.Errorf("%w: OUTBOX_ROUTES=%q: %w", relay.ErrInvalidConfig, s, err)
		}
		c.Routes = routes
	}
	if err := queuesFromLookup(lookup, &c); err != nil {
		return relay.Config{}, err
	}
	limit, err := codecMaxDecoded(lookup)
	if err != nil {
		return relay.Config{}, err
	}
	if s, ok := lookup(CodecKeysFileEnv); ok && strings.TrimSpace(s) != "" {
		codec, err := CodecFromKeysFile(strings.TrimSpace(s), limit)
		if err != nil {
			return relay.Config{}, fmt.Errorf("%w: %s: %w", relay.ErrInvalidConfig, CodecKeysFileEnv, err)
		}
		c.Location.Codec = codec
	}
	return c, nil
}

func parseRoutes(s string) (fanout.Routes, error) {
	routes := fanout.Routes{}
	for _, route := range strings.Split(s, ";") {
		if strings.TrimSpace(route) == "" {
			continue
		}
		event, listeners, ok := strings.Cut(route, "=")
		event = strings.TrimSpace(event)
		if !ok || event == "" || strings.TrimSpace(listeners) == "" {
			return nil, fmt.Errorf("route %q is not event=listener[,listener]", route)
		}
		for _, l := range strings.Split(listeners, ",") {
			routes[event] = append(routes[event], strings.TrimSpace(l))
		}
	}
	return routes, nil
}

// queuesFromLookup reads OUTBOX_QUEUES ("critical:6,default:3,bulk:1"), OUTBOX_STRICT_PRIORITY and
// OUTBOX_CANCEL_CHECK_INTERVAL into c, for ConfigFromEnv.
func queuesFromLookup(lookup func(string) (string, bool), c *relay.Config) error {
	if s, ok := lookup("OUTBOX_QUEUES"); ok && s != "" {
		c.Queues = map[string]int{}
		for _, item := range strings.Split(s, ",") {
			if strings.TrimSpace(item) == "" {
				continue
			}
			name, weight, ok := strings.Cut(item, ":")
			w, err := strconv.Atoi(strings.TrimSpace(weight))
			if name = strings.TrimSpace(name); !ok || name == "" || err != nil {
				return fmt.Errorf("%w: OUTBOX_QUEUES=%q: %q is not queue:weight", relay.ErrInvalidConfig, s, item)
			}
			c.Queues[name] = w
		}
	}
	if s, ok := lookup("OUTBOX_STRICT_PRIORITY"); ok && s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%w: OUTBOX_STRICT_PRIORITY=%q is not a boolean", relay.ErrInvalidConfig, s)
		}
		c.StrictPriority = b
	}
	if s, ok := lookup("OUTBOX_CANCEL_CHECK_INTERVAL"); ok && s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%w: OUTBOX_CANCEL_CHECK_INTERVAL=%q is not a duration like 500ms or 24h", relay.ErrInvalidConfig, s)
		}
		c.CancelCheckInterval = d
	}
	return nil
}

// CodecKeysFileEnv is the variable Config reads Config.Codec from: the path of a keyring file.
const CodecKeysFileEnv = "OUTBOX_CODEC_KEYS_FILE"

// CodecMaxDecodedEnv is the variable that gives the Codec of a keyring file its limit on a decoded
// payload, in bytes (model.MaxDecodedSize; unset: 1 MiB): at least the writers' limit.
const CodecMaxDecodedEnv = "OUTBOX_CODEC_MAX_DECODED_SIZE"

// codecMaxDecoded reads CodecMaxDecodedEnv; 0 when it is unset.
func codecMaxDecoded(lookup func(string) (string, bool)) (int, error) {
	s, ok := lookup(CodecMaxDecodedEnv)
	if !ok || strings.TrimSpace(s) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s=%q is not a positive number of bytes", relay.ErrInvalidConfig, CodecMaxDecodedEnv, s)
	}
	return n, nil
}

// CodecMaxDecoded reads CodecMaxDecodedEnv from the environment; 0 when it is unset.
func CodecMaxDecoded() (int, error) { return codecMaxDecoded(os.LookupEnv) }

// CodecFromKeysFile returns the Codec that decodes with the keys of the keyring file at path (see
// model.ParseKeyring for its format: "current=id" and "id=base64 key" lines) and decodes payloads of up
// to maxDecoded bytes (model.MaxDecodedSize; 0: its default, 1 MiB), for Config
// (OUTBOX_CODEC_KEYS_FILE) and `bunbox relay -codec-keys-file`. The relay only decodes, so the Codec
// needs no compression setting: gzip is decoded whatever the writer's CompressAbove. An error names the
// file and the line, never a key.
func CodecFromKeysFile(path string, maxDecoded int) (*model.Codec, error) {
	ring, err := model.ReadKeyringFile(path)
	if err != nil {
		return nil, err
	}
	opts := []model.CodecOption{model.EncryptWith(ring)}
	if maxDecoded > 0 {
		opts = append(opts, model.MaxDecodedSize(maxDecoded))
	}
	return model.NewCodec(opts...)
}

// Redis reads the relay's Redis from OUTBOX_REDIS_URL, in any form connect.Redis reads
// (redis://:password@host:6379/0, rediss://, redis-sentinel://...?master=NAME, redis-cluster://h1,h2),
// for New and NewReconciler. ok is false when the variable is unset or empty; an error shows the URL with
// its password masked.
func Redis() (opt asynq.RedisConnOpt, ok bool, err error) {
	return redisFromLookup(os.LookupEnv)
}

func redisFromLookup(lookup func(string) (string, bool)) (asynq.RedisConnOpt, bool, error) {
	s, ok := lookup("OUTBOX_REDIS_URL")
	if !ok || s == "" {
		return nil, false, nil
	}
	opt, err := connect.Redis(s)
	if err != nil {
		return nil, false, err
	}
	return opt, true, nil
}
