package connect

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// redisCAFileEnv is the environment variable that names a PEM file of the CA certificates a TLS Redis
// URL (rediss://, rediss-sentinel://, rediss-cluster://) verifies the server against, when the URL has
// no tls_ca_file parameter (see Redis).
const redisCAFileEnv = "REDIS_TLS_CA_FILE"

// Redis reads a Redis URL into asynq's connection options, for relay.New, relay.NewReconciler, asynq's
// client, server and inspector. The forms:
//
//	redis://[:password@]host[:port][/db]                one server (port 6379 when none)
//	redis://user:password@host[:port][/db]              the same, as a Redis 6 ACL user
//	rediss://[user:password@]host[:port][/db][?tls]     the same over TLS (see below)
//	redis-socket://[:password@]/path/to/redis.sock[?db=N]
//	redis-sentinel://[:sentinel-password@]host:26379[,host:26379...][/db]?master=NAME[&password=P]
//	                                                    Sentinel: the sentinels' addresses, the master's name,
//	                                                    and the master's own password, if any, as password=
//	rediss-sentinel://...?master=NAME[&password=P][&tls]  the same with the sentinels and the master over TLS
//	redis-cluster://[user:password@]host:port[,host:port...]    a Cluster: some of its nodes, comma-separated
//	rediss-cluster://[user:password@]host:port[,host:port...][?tls]   the same over TLS
//
// The redis, rediss and redis-socket forms are read by asynq.ParseRedisURI, with the user name (for Redis
// 6 ACLs) and the default port added, which it leaves out. The redis-sentinel form reads as asynq's does
// (the userinfo authenticates to the sentinels), and adds the database, the master's password and
// sentinel lists whose hosts do not all have a port. A parameter that a form does not take is an error,
// not ignored. A userinfo without ':' (redis://NAME@host) is refused: Redis's own client reads it as the
// password, go-redis as a user name that it never sends (it authenticates only with a password); write
// redis://:PASSWORD@host or redis://USER:PASSWORD@host. White space around rawURL is ignored. Every error
// is an *Error that shows the URL with its password masked.
//
// # TLS
//
// The TLS forms (rediss, rediss-sentinel, rediss-cluster) always verify the server's certificate chain
// and its name: against the host in the URL for rediss://, and against each address dialled for the
// others (the master's address as the sentinels announce it, the nodes' as the Cluster announces them:
// their certificates must name those hosts or IP addresses). The chain is checked against the system's
// roots, or against a private CA: the PEM file named by the URL's tls_ca_file parameter, or else by the
// REDIS_TLS_CA_FILE environment variable, when the URL has no tls_ca_file. tls_cert_file and tls_key_file give a client
// certificate, for a Redis with tls-auth-clients on. TLS 1.2 is the least accepted. There is no switch
// that turns verification off: for a self-signed server certificate, name it as tls_ca_file.
//
//	rediss://:secret@cache.internal:6380/0?tls_ca_file=/etc/ssl/redis-ca.pem
func Redis(rawURL string) (asynq.RedisConnOpt, error) {
	rawURL = strings.TrimSpace(rawURL)
	opt, err := parseRedis(rawURL, os.Getenv)
	if err != nil {
		return nil, newError("Redis", rawURL, err, "invalid Redis URL %s")
	}
	return opt, nil
}

// tlsParams are the query parameters of the TLS forms.
var tlsParams = []string{"tls_ca_file", "tls_cert_file", "tls_key_file"}

func parseRedis(rawURL string, getenv func(string) string) (asynq.RedisConnOpt, error) {
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
	if u.User != nil {
		if _, ok := u.User.Password(); !ok && u.User.Username() != "" {
			return nil, errors.New("it has a user name and no password (scheme://NAME@host), which Redis's own client reads as the password and go-redis ignores: " +
				"write scheme://:PASSWORD@host for a password, scheme://USER:PASSWORD@host for an ACL user")
		}
	}
	q := u.Query()
	tlsForm := u.Scheme == "rediss" || u.Scheme == "rediss-sentinel" || u.Scheme == "rediss-cluster"
	var allowed []string
	if tlsForm {
		allowed = tlsParams
	} else {
		for _, k := range tlsParams {
			if q.Has(k) {
				return nil, fmt.Errorf("parameter %q is for TLS: use rediss://, rediss-sentinel:// or rediss-cluster://", k)
			}
		}
	}
	switch u.Scheme {
	case "redis", "rediss":
		if err := onlyParams(q, allowed...); err != nil {
			return nil, err
		}
		if u.Host == "" {
			return nil, errors.New("the host is empty")
		}
		if len(hosts) > 1 {
			return nil, errors.New("several hosts: use redis-cluster:// for a Cluster or redis-sentinel:// for Sentinel")
		}
		u.RawQuery = "" // read here, not by asynq
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
		if tlsForm {
			if o.TLSConfig, err = redisTLS(q, u.Hostname(), getenv); err != nil {
				return nil, err
			}
		}
		return o, nil
	case "redis-socket":
		if err := onlyParams(q, "db"); err != nil {
			return nil, err
		}
		return asynq.ParseRedisURI(rawURL)
	case "redis-sentinel", "rediss-sentinel":
		if err := onlyParams(q, append([]string{"master", "password"}, allowed...)...); err != nil {
			return nil, err
		}
		if q.Get("master") == "" {
			return nil, fmt.Errorf("a %s URL needs ?master=NAME, the name of the master the sentinels watch", u.Scheme)
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
		if tlsForm {
			// No ServerName: go-redis dials the sentinels and then the master at the address they
			// announce, and Go's TLS checks each address dialled.
			if o.TLSConfig, err = redisTLS(q, "", getenv); err != nil {
				return nil, err
			}
		}
		return o, nil
	case "redis-cluster", "rediss-cluster":
		if err := onlyParams(q, allowed...); err != nil {
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
		if tlsForm {
			// No ServerName: go-redis dials each node by its address, and Go's TLS checks it.
			if o.TLSConfig, err = redisTLS(q, "", getenv); err != nil {
				return nil, err
			}
		}
		return o, nil
	default:
		return nil, fmt.Errorf("the scheme %q is not one of redis, rediss, redis-socket, redis-sentinel, rediss-sentinel, redis-cluster, rediss-cluster", u.Scheme)
	}
}

// redisTLS is the TLS configuration of a TLS form: verification on, against the CA file of the URL
// (tls_ca_file) or of the environment (redisCAFileEnv), or the system's roots; serverName "" lets Go's
// TLS check the address go-redis dials.
func redisTLS(q url.Values, serverName string, getenv func(string) string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	caFile, from := q.Get("tls_ca_file"), "tls_ca_file"
	if caFile == "" {
		caFile, from = getenv(redisCAFileEnv), redisCAFileEnv
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s holds no PEM certificate", from, caFile)
		}
	}
	certFile, keyFile := q.Get("tls_cert_file"), q.Get("tls_key_file")
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls_cert_file and tls_key_file go together: give both or neither")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls_cert_file/tls_key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
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
