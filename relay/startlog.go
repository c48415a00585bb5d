package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// startAttrs are the attributes of the relay's start log line that say what it works on: the database
// (user@host:port/name, as the server reports it: never a password), the outbox table, Redis's address
// and the delivery mode (stream or per-row, see EnableStream).
func (r *Relay) startAttrs(ctx context.Context) []slog.Attr {
	mode := "per-row"
	if r.rounds.stream.streaming(ctx) {
		mode = "stream"
	}
	return []slog.Attr{slog.String("database", r.databaseName(ctx)), slog.String("table", r.names.Outbox()),
		slog.String("redis", redisName(r.redisOpt, r.rdb == nil)), slog.String("delivery", mode)}
}

// databaseName is user@host:port/dbname as the server reports it, or why it could not be read.
func (r *Relay) databaseName(ctx context.Context) string {
	var user, host, name string
	var port int
	err := r.db.QueryRowContext(ctx, `SELECT current_user, coalesce(host(inet_server_addr()), 'local socket'),
  coalesce(inet_server_port(), 0), current_database()`).Scan(&user, &host, &port, &name)
	if err != nil {
		return "unknown: " + err.Error()
	}
	return fmt.Sprintf("%s@%s/%s", user, hostPort(host, port), name)
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(port)
}

// redisName is where the relay's Redis is, from the options given to New, without credentials.
func redisName(opt asynq.RedisConnOpt, enqueuer bool) string {
	if enqueuer {
		return "Config.Enqueuer's"
	}
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		return o.Addr + "/" + strconv.Itoa(o.DB)
	case *asynq.RedisClientOpt:
		return o.Addr + "/" + strconv.Itoa(o.DB)
	case asynq.RedisFailoverClientOpt:
		return "sentinel " + o.MasterName + " at " + strings.Join(o.SentinelAddrs, ",")
	case *asynq.RedisFailoverClientOpt:
		return "sentinel " + o.MasterName + " at " + strings.Join(o.SentinelAddrs, ",")
	case asynq.RedisClusterClientOpt:
		return "cluster " + strings.Join(o.Addrs, ",")
	case *asynq.RedisClusterClientOpt:
		return "cluster " + strings.Join(o.Addrs, ",")
	default:
		return fmt.Sprintf("%T", opt)
	}
}
