package connect_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestRedis(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		url  string
		want asynq.RedisConnOpt
	}{
		{"Plain", "redis://cache:6379", asynq.RedisClientOpt{Addr: "cache:6379"}},
		{"DefaultPort", "redis://cache", asynq.RedisClientOpt{Addr: "cache:6379"}},
		{"TrailingSlash", "redis://:pw@cache:6379/", asynq.RedisClientOpt{Addr: "cache:6379", Password: "pw"}},
		{"PasswordAndDB", "redis://:pw@cache:6379/3", asynq.RedisClientOpt{Addr: "cache:6379", Password: "pw", DB: 3}},
		{"ACLUser", "redis://app:pw@cache:6379", asynq.RedisClientOpt{Addr: "cache:6379", Username: "app", Password: "pw"}},
		{"EscapedPassword", "redis://:p%40ss%2Fw@cache", asynq.RedisClientOpt{Addr: "cache:6379", Password: "p@ss/w"}},
		{"TLS", "rediss://app:pw@cache.example.com:6380/1", asynq.RedisClientOpt{
			Addr: "cache.example.com:6380", Username: "app", Password: "pw", DB: 1,
			TLSConfig: &tls.Config{ServerName: "cache.example.com", MinVersion: tls.VersionTLS12},
		}},
		// White space around the URL (a variable written with a trailing newline) is not part of it.
		{"SurroundingWhiteSpace", " \trediss://:pw@cache.example.com:6380/2\n", asynq.RedisClientOpt{
			Addr: "cache.example.com:6380", Password: "pw", DB: 2,
			TLSConfig: &tls.Config{ServerName: "cache.example.com", MinVersion: tls.VersionTLS12},
		}},
		{"SentinelTLS", "rediss-sentinel://:spw@s1,s2:26380?master=m&password=mpw", asynq.RedisFailoverClientOpt{
			MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:26380"}, SentinelPassword: "spw", Password: "mpw",
			TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		}},
		{"Socket", "redis-socket://:pw@/run/redis.sock?db=2", asynq.RedisClientOpt{Network: "unix", Addr: "/run/redis.sock", Password: "pw", DB: 2}},
		{"Sentinel", "redis-sentinel://:spw@s1:26379,s2?master=mymaster", asynq.RedisFailoverClientOpt{
			MasterName: "mymaster", SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelPassword: "spw",
		}},
		{"SentinelMasterPasswordAndDB", "redis-sentinel://s1:26379/4?master=m&password=mpw", asynq.RedisFailoverClientOpt{
			MasterName: "m", SentinelAddrs: []string{"s1:26379"}, Password: "mpw", DB: 4,
		}},
		{"Cluster", "redis-cluster://app:pw@n1:7000,n2:7001,n3", asynq.RedisClusterClientOpt{
			Addrs: []string{"n1:7000", "n2:7001", "n3:6379"}, Username: "app", Password: "pw",
		}},
		{"ClusterTLS", "rediss-cluster://n1:7000,n2:7001", asynq.RedisClusterClientOpt{
			Addrs: []string{"n1:7000", "n2:7001"}, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := connect.Redis(tt.url)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRedisInvalid(t *testing.T) {
	t.Parallel()

	tests := []struct{ url, wantErr string }{
		{"", "it is empty"},
		{"cache:6379", "has no scheme"},
		{"memcached://cache", `the scheme "memcached" is not one of`},
		{"redis://", "the host is empty"},
		{"redis://cache/zero", "database number"},
		{"redis://cache?password=pw", `parameter "password" is not supported: this form takes none`},
		{"redis-sentinel://s1:26379", "needs ?master=NAME"},
		{"redis-sentinel://s1:26379/x?master=m", "database number"},
		{"redis-sentinel://s1,,s2?master=m", "a sentinel address is empty"},
		{"redis-cluster://n1:7000/1", "only database 0"},
		{"redis-cluster://n1:7000,,n2", "a node address is empty"},
		{"redis://:Pa%ZZpw@cache", "invalid %-escape"},
		// A lone userinfo: Redis's own client reads it as the password, go-redis never sends it.
		{"redis://secretpw@cache", "it has a user name and no password"},
		{"rediss://secretpw@cache", "it has a user name and no password"},
		{"redis-sentinel://secretpw@s1?master=m", "it has a user name and no password"},
		{"redis-cluster://secretpw@n1:7000,n2:7001", "it has a user name and no password"},
		{"redis-socket://secretpw@/run/redis.sock", "it has a user name and no password"},
		// TLS parameters on a form without TLS, and what a TLS form cannot read.
		{"redis://cache?tls_ca_file=/ca.pem", `parameter "tls_ca_file" is for TLS: use rediss://`},
		{"redis-sentinel://s1?master=m&tls_ca_file=/ca.pem", `parameter "tls_ca_file" is for TLS`},
		{"rediss://cache?tls_ca_file=/nonexistent/ca.pem", "tls_ca_file: open /nonexistent/ca.pem: no such file"},
		{"rediss://cache?tls_cert_file=/c.pem", "tls_cert_file and tls_key_file go together"},
		{"rediss://cache?skip_verify=true", `parameter "skip_verify" is not supported`},
		{"rediss-sentinel://s1", "a rediss-sentinel URL needs ?master=NAME"},
		{" \n ", "it is empty"},
	}
	for _, tt := range tests {
		_, err := connect.Redis(tt.url)
		require.ErrorContains(t, err, tt.wantErr, tt.url)
		var cerr *connect.Error
		require.ErrorAs(t, err, &cerr, tt.url)
		require.Equal(t, "Redis", cerr.Kind)
		require.NotContains(t, err.Error(), "secretpw", tt.url)
	}
}

func TestRedisPassword(t *testing.T) {
	t.Parallel()
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{Password: "redis-pw-1"})

	ok, err := connect.Redis("redis://:redis-pw-1@" + rd.Addr() + "/2")
	require.NoError(t, err)
	c := asynq.NewClient(ok)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping())

	wrong, err := connect.Redis("redis://:wrong-pw@" + rd.Addr())
	require.NoError(t, err)
	w := asynq.NewClient(wrong)
	t.Cleanup(func() { _ = w.Close() })
	err = w.Ping()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "wrong-pw")
}

// rediss:// verifies the server's certificate: a TLS server with a certificate from an unknown CA is
// refused during the handshake, before any Redis command (and so before the password) is sent.
func TestRedisTLSVerifies(t *testing.T) {
	t.Parallel()

	ca := newTestCA(t, "untrusted CA")
	certPEM, keyPEM := ca.issue(t, "localhost", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	received := make(chan []byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 512)
			n, _ := c.Read(buf) // completes the handshake, or fails it
			received <- buf[:n]
			_ = c.Close()
		}
	}()

	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	opt, err := connect.Redis("rediss://:tls-secret@localhost:" + port)
	require.NoError(t, err)
	c := asynq.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	err = c.Ping()
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	require.Empty(t, <-received, "nothing reached the server")
}

// A redis-sentinel:// URL reaches, through a real Sentinel, the password-protected master it watches.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)

	const password = "sentinel-master-pw"
	master := outboxtest.StartRedis(t, &outboxtest.RedisOptions{Password: password, NoPersistence: true})
	masterHost, masterPort, err := net.SplitHostPort(master.Addr())
	require.NoError(t, err)

	// A Sentinel rewrites its config file, so it gets one of its own.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sentinelAddr := l.Addr().String()
	require.NoError(t, l.Close())
	_, sentinelPort, _ := net.SplitHostPort(sentinelAddr)
	dir := t.TempDir()
	conf := writeFile(t, dir, "sentinel.conf", []byte(fmt.Sprintf(
		"port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor mymaster %s %s 1\nsentinel auth-pass mymaster %s\n",
		sentinelPort, dir, masterHost, masterPort, password)))
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	opt, err := connect.Redis("redis-sentinel://" + sentinelAddr + "/0?master=mymaster&password=" + password)
	require.NoError(t, err)
	c := asynq.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	outboxtest.WaitFor(t, 20*time.Second, "the master through the Sentinel", func() bool { return c.Ping() == nil })
	_, err = c.Enqueue(asynq.NewTask("sentinel.test", nil), asynq.TaskID("via-sentinel"))
	require.NoError(t, err)

	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: master.Addr(), Password: password})
	t.Cleanup(func() { _ = ins.Close() })
	info, err := ins.GetTaskInfo("default", "via-sentinel")
	require.NoError(t, err)
	require.Equal(t, "sentinel.test", info.Type)
}
