package relay

import (
	"os"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/connect"
)

// RedisFromEnv reads the relay's Redis from OUTBOX_REDIS_URL, in any form connect.Redis reads
// (redis://:password@host:6379/0, rediss://, redis-sentinel://...?master=NAME, redis-cluster://h1,h2),
// for New and NewReconciler. ok is false when the variable is unset or empty; an error shows the URL with
// its password masked.
func RedisFromEnv() (opt asynq.RedisConnOpt, ok bool, err error) {
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
