package connect

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// Redis reads a Redis URL into asynq's connection options, for relay.New, relay.NewReconciler, asynq's
// client, server and inspector. The forms:
//
//	redis://[user:password@]host[:port][/db]           one server (port 6379 when none)
//	rediss://[user:password@]host[:port][/db]          the same over TLS, verifying the server's
//	                                                   certificate against the system's roots and its name
//	redis-socket://[:password@]/path/to/redis.sock[?db=N]
//	redis-sentinel://[:sentinel-password@]host:26379[,host:26379...][/db]?master=NAME[&password=P]
//	                                                   Sentinel: the sentinels' addresses, the master's name,
//	                                                   and the master's own password, if any, as password=
//	redis-cluster://[user:password@]host:port[,host:port...]    a Cluster: some of its nodes, comma-separated
//	rediss-cluster://[user:password@]host:port[,host:port...]   the same over TLS
//
// The redis, rediss and redis-socket forms are read by asynq.ParseRedisURI, with the user name (for Redis
// 6 ACLs) and the default port added, which it leaves out. The redis-sentinel form reads as asynq's does
// (the userinfo authenticates to the sentinels), and adds the database, the master's password and
// sentinel lists whose hosts do not all have a port. A parameter that a form does not take is an error,
// not ignored. Every error is an *Error that shows the URL with its password masked.
//
// rediss:// checks the server's certificate against the system's roots; for a private CA, set RootCAs on
// the TLSConfig of the options it returns (a RedisClientOpt for rediss://).
func Redis(rawURL string) (asynq.RedisConnOpt, error) {
	opt, err := parseRedis(rawURL)
	if err != nil {
		return nil, newError("Redis", rawURL, err, "invalid Redis URL %s")
	}
	return opt, nil
}

func parseRedis(rawURL string) (asynq.RedisConnOpt, error) {
	if rawURL == "" {
		return nil, errors.New("it is empty")
	}
	if schemeEnd(rawURL) == 0 {
		return nil, errors.New("it has no scheme: want redis://host:port, rediss://, redis-sentinel://, redis-cluster:// or redis-socket://")
	}
	u, hosts, err := parseHostList(rawURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	switch u.Scheme {
	case "redis", "rediss":
		if err := onlyParams(q); err != nil {
			return nil, err
		}
		if u.Host == "" {
			return nil, errors.New("the host is empty")
		}
		if len(hosts) > 1 {
			return nil, errors.New("several hosts: use redis-cluster:// for a Cluster or redis-sentinel:// for Sentinel")
		}
		if strings.Trim(u.Path, "/") == "" {
			u.Path, u.RawPath = "", "" // redis://host/ is database 0; asynq wants a number after the '/'
		}
		opt, err := asynq.ParseRedisURI(u.String())
		if err != nil {
			return nil, err
		}
		o := opt.(asynq.RedisClientOpt)
		o.Username = userName(u)
		o.Addr = withPort(u.Host, "6379")
		return o, nil
	case "redis-socket":
		if err := onlyParams(q, "db"); err != nil {
			return nil, err
		}
		return asynq.ParseRedisURI(rawURL)
	case "redis-sentinel":
		if err := onlyParams(q, "master", "password"); err != nil {
			return nil, err
		}
		if q.Get("master") == "" {
			return nil, errors.New("a redis-sentinel URL needs ?master=NAME, the name of the master the sentinels watch")
		}
		o := asynq.RedisFailoverClientOpt{MasterName: q.Get("master"), Password: q.Get("password")}
		o.SentinelPassword, _ = u.User.Password()
		if o.DB, err = dbNumber(u); err != nil {
			return nil, err
		}
		for _, a := range hosts {
			if a == "" {
				return nil, errors.New("a sentinel address is empty")
			}
			o.SentinelAddrs = append(o.SentinelAddrs, withPort(a, "26379"))
		}
		return o, nil
	case "redis-cluster", "rediss-cluster":
		if err := onlyParams(q); err != nil {
			return nil, err
		}
		if u.Path != "" && u.Path != "/" {
			return nil, errors.New("a Redis Cluster has only database 0: the URL takes no /db")
		}
		o := asynq.RedisClusterClientOpt{Username: userName(u)}
		o.Password, _ = u.User.Password()
		for _, a := range hosts {
			if a == "" {
				return nil, errors.New("a node address is empty")
			}
			o.Addrs = append(o.Addrs, withPort(a, "6379"))
		}
		if u.Scheme == "rediss-cluster" {
			// No ServerName: go-redis sets it per node from the address it dials, and checks it.
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		return o, nil
	default:
		return nil, fmt.Errorf("the scheme %q is not one of redis, rediss, redis-socket, redis-sentinel, redis-cluster, rediss-cluster", u.Scheme)
	}
}

// parseHostList parses rawURL, whose host may be a comma-separated list (url.Parse refuses one whose hosts
// do not all have a port, or all none), and returns the list apart.
func parseHostList(rawURL string) (*url.URL, []string, error) {
	i := schemeEnd(rawURL)
	rest := rawURL[i:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	hostList := rest[at+1 : end]
	if !strings.Contains(hostList, ",") {
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, nil, withoutURL(err)
		}
		return u, []string{u.Host}, nil
	}
	u, err := url.Parse(rawURL[:i] + rest[:at+1] + "list" + rest[end:])
	if err != nil {
		return nil, nil, withoutURL(err)
	}
	hosts := strings.Split(hostList, ",")
	for _, h := range hosts {
		if h != "" {
			if _, err := url.Parse("redis://" + h); err != nil {
				return nil, nil, withoutURL(err)
			}
		}
	}
	u.Host = hostList
	return u, hosts, nil
}

// onlyParams refuses query parameters other than the allowed ones, naming the first it finds.
func onlyParams(q url.Values, allowed ...string) error {
	for k := range q {
		if !contains(allowed, k) {
			if len(allowed) == 0 {
				return fmt.Errorf("parameter %q is not supported: this form takes none", k)
			}
			return fmt.Errorf("parameter %q is not supported: this form takes %s", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func userName(u *url.URL) string {
	if u.User == nil {
		return ""
	}
	return u.User.Username()
}

// withPort adds port to addr when it has none.
func withPort(addr, port string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), port)
}

// dbNumber reads the database number from the URL's path, as asynq does for redis://.
func dbNumber(u *url.URL) (int, error) {
	p := strings.Trim(u.Path, "/")
	if p == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 {
		return 0, errors.New("the path must be the database number, such as /0")
	}
	return n, nil
}
