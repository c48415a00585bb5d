package main

import (
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/connect"
)

// redisDialTimeout bounds each connection to Redis, so that a Redis that does not answer is reported
// within seconds.
const redisDialTimeout = 5 * time.Second

// redis returns the Redis options of -redis-url (REDIS_URL), or else of -redis-addr (REDIS_ADDR), and
// how to name that Redis in messages, with its password masked.
func (c *cli) redis() (asynq.RedisConnOpt, string, error) {
	if c.redisURL == "" {
		return asynq.RedisClientOpt{Addr: c.redisAddr, DialTimeout: redisDialTimeout}, c.redisAddr, nil
	}
	opt, err := connect.Redis(c.redisURL)
	if err != nil {
		return nil, "", err
	}
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		o.DialTimeout = redisDialTimeout
		opt = o
	case asynq.RedisFailoverClientOpt:
		o.DialTimeout = redisDialTimeout
		opt = o
	case asynq.RedisClusterClientOpt:
		o.DialTimeout = redisDialTimeout
		opt = o
	}
	return opt, connect.Redact(c.redisURL), nil
}
