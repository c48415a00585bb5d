package connect_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/outboxtest"
)

// tlsRedis is a private redis-server with TLS only (--port 0), its certificate for localhost and
// 127.0.0.1 signed by ca, listening on 127.0.0.1 and 127.0.0.2.
type tlsRedis struct {
	port                string
	caFile, wrongCAFile string
	clientCert          string // signed by ca
	clientKey           string
	certFile, keyFile   string // the server's, for a Sentinel next to it
	dir                 string
}

const tlsRedisPassword = "tls-redis-pw"

func startTLSRedis(t *testing.T) *tlsRedis {
	t.Helper()
	outboxtest.SkipShort(t)
	ca, wrong := newTestCA(t, "bunbox redis CA"), newTestCA(t, "some other CA")
	srvCert, srvKey := ca.issue(t, "localhost", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	// Redis's TLS port also serves replication and Sentinel, so its certificate is a client's as well.
	cliCert, cliKey := ca.issue(t, "app", nil, nil, x509.ExtKeyUsageClientAuth)
	dir := t.TempDir()
	r := &tlsRedis{
		dir:         dir,
		caFile:      writeFile(t, dir, "ca.pem", ca.pem),
		wrongCAFile: writeFile(t, dir, "wrong-ca.pem", wrong.pem),
		clientCert:  writeFile(t, dir, "client.crt", cliCert),
		clientKey:   writeFile(t, dir, "client.key", cliKey),
		certFile:    writeFile(t, dir, "server.crt", srvCert),
		keyFile:     writeFile(t, dir, "server.key", srvKey),
	}
	r.port = startRedisProcess(t, r, "--requirepass", tlsRedisPassword, "--bind", "127.0.0.1 127.0.0.2")
	return r
}

// startRedisProcess runs redis-server with TLS only, on a free port, with r's certificates and args, and
// returns the port once it accepts a TLS handshake.
func startRedisProcess(t *testing.T, r *tlsRedis, args ...string) string {
	t.Helper()
	port := freeTCPPort(t)
	base := []string{"--port", "0", "--tls-port", port, "--tls-cert-file", r.certFile, "--tls-key-file", r.keyFile,
		"--tls-ca-cert-file", r.caFile, "--tls-auth-clients", "optional", "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--dir", t.TempDir()}
	cmd := exec.Command("redis-server", append(base, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitTLS(t, "127.0.0.1:"+port, r.caFile)
	return port
}

// waitTLS waits until addr completes a TLS handshake.
func waitTLS(t *testing.T, addr, caFile string) {
	t.Helper()
	opt, err := connect.Redis("rediss://" + addr + "?tls_ca_file=" + caFile)
	require.NoError(t, err)
	cfg := opt.(asynq.RedisClientOpt).TLSConfig
	outboxtest.WaitFor(t, 20*time.Second, "redis-server's TLS port "+addr, func() bool {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
}

func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return port
}

// pingErr connects with url as connect.Redis reads it and returns the error of a PING through asynq.
func pingErr(t *testing.T, url string) error {
	t.Helper()
	opt, err := connect.Redis(url)
	require.NoError(t, err)
	c := asynq.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c.Ping()
}

// TestRedisTLS: rediss:// against a real Redis with TLS on: the chain is checked against the CA given
// by the URL (or the system's roots), the host name against the URL's host, and no password reaches an
// error.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	r := startTLSRedis(t)
	url := func(host, query string) string {
		return "rediss://:" + tlsRedisPassword + "@" + net.JoinHostPort(host, r.port) + "/1" + query
	}

	tests := []struct {
		name, url, wantErr string
	}{
		{"PrivateCA", url("localhost", "?tls_ca_file="+r.caFile), ""},
		{"PrivateCAByIP", url("127.0.0.1", "?tls_ca_file="+r.caFile), ""},
		{"ClientCertificate", url("localhost", "?tls_ca_file="+r.caFile+"&tls_cert_file="+r.clientCert+"&tls_key_file="+r.clientKey), ""},
		{"WhiteSpace", " " + url("localhost", "?tls_ca_file="+r.caFile) + "\n", ""},
		{"SystemRoots", url("localhost", ""), "certificate signed by unknown authority"},
		{"WrongCA", url("localhost", "?tls_ca_file="+r.wrongCAFile), "certificate signed by unknown authority"},
		{"WrongHost", url("127.0.0.2", "?tls_ca_file="+r.caFile), "not 127.0.0.2"},
		{"WrongPassword", "rediss://:wrong-tls-pw@localhost:" + r.port + "?tls_ca_file=" + r.caFile, "WRONGPASS"},
		{"PlainTextOnTLSPort", "redis://:" + tlsRedisPassword + "@localhost:" + r.port, ""}, // an error, whatever its text
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := pingErr(t, tt.url)
			if tt.name == "PlainTextOnTLSPort" {
				require.Error(t, err)
				return
			}
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), tlsRedisPassword)
			require.NotContains(t, err.Error(), "wrong-tls-pw")
		})
	}

	t.Run("Enqueue", func(t *testing.T) {
		t.Parallel()
		opt, err := connect.Redis(url("localhost", "?tls_ca_file="+r.caFile))
		require.NoError(t, err)
		c := asynq.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.Enqueue(asynq.NewTask("tls.test", []byte("{}")), asynq.TaskID("over-tls"))
		require.NoError(t, err)
		ins := asynq.NewInspector(opt)
		t.Cleanup(func() { _ = ins.Close() })
		info, err := ins.GetTaskInfo("default", "over-tls")
		require.NoError(t, err)
		require.Equal(t, "tls.test", info.Type)
	})
}

// TestRedisTLSCAFromEnv: a private CA given by REDIS_TLS_CA_FILE, for a URL without tls_ca_file; the
// URL's parameter wins. Not parallel: it sets the environment.
func TestRedisTLSCAFromEnv(t *testing.T) {
	r := startTLSRedis(t)
	base := "rediss://:" + tlsRedisPassword + "@localhost:" + r.port

	t.Setenv("REDIS_TLS_CA_FILE", r.caFile)
	require.NoError(t, pingErr(t, base))
	require.ErrorContains(t, pingErr(t, base+"?tls_ca_file="+r.wrongCAFile), "certificate signed by unknown authority")
	// Only the TLS forms read it: a plain URL is unchanged.
	opt, err := connect.Redis("redis://:pw@localhost:" + r.port)
	require.NoError(t, err)
	require.Nil(t, opt.(asynq.RedisClientOpt).TLSConfig)

	t.Setenv("REDIS_TLS_CA_FILE", r.wrongCAFile)
	require.ErrorContains(t, pingErr(t, base), "certificate signed by unknown authority")
	require.NoError(t, pingErr(t, base+"?tls_ca_file="+r.caFile))

	t.Setenv("REDIS_TLS_CA_FILE", r.dir+"/missing.pem")
	_, err = connect.Redis(base)
	require.ErrorContains(t, err, "REDIS_TLS_CA_FILE: open "+r.dir+"/missing.pem")
	require.NotContains(t, err.Error(), tlsRedisPassword)
}

// TestRedisSentinelTLS: a rediss-sentinel:// URL reaches, through a Sentinel with TLS on, the
// password-protected TLS master it watches, checking both certificates against the URL's CA.
func TestRedisSentinelTLS(t *testing.T) {
	t.Parallel()
	r := startTLSRedis(t)
	sentinelPort := freeTCPPort(t)
	conf := writeFile(t, t.TempDir(), "sentinel.conf", []byte(strings.Join([]string{
		"port 0", "tls-port " + sentinelPort, "bind 127.0.0.1", "protected-mode no",
		"tls-cert-file " + r.certFile, "tls-key-file " + r.keyFile, "tls-ca-cert-file " + r.caFile,
		"tls-auth-clients optional",
		"tls-replication yes", // the Sentinel speaks TLS to the master
		"sentinel monitor mymaster 127.0.0.1 " + r.port + " 1",
		"sentinel auth-pass mymaster " + tlsRedisPassword,
	}, "\n")+"\n"))
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitTLS(t, "127.0.0.1:"+sentinelPort, r.caFile)

	u := fmt.Sprintf("rediss-sentinel://127.0.0.1:%s/0?master=mymaster&password=%s&tls_ca_file=%s", sentinelPort, tlsRedisPassword, r.caFile)
	opt, err := connect.Redis(u)
	require.NoError(t, err)
	c := asynq.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	outboxtest.WaitFor(t, 30*time.Second, "the TLS master through the TLS Sentinel", func() bool { return c.Ping() == nil })
	_, err = c.Enqueue(asynq.NewTask("sentinel.tls", nil), asynq.TaskID("via-tls-sentinel"))
	require.NoError(t, err)

	direct, err := connect.Redis("rediss://:" + tlsRedisPassword + "@127.0.0.1:" + r.port + "?tls_ca_file=" + r.caFile)
	require.NoError(t, err)
	ins := asynq.NewInspector(direct)
	t.Cleanup(func() { _ = ins.Close() })
	info, err := ins.GetTaskInfo("default", "via-tls-sentinel")
	require.NoError(t, err)
	require.Equal(t, "sentinel.tls", info.Type)

	// Without the CA, the Sentinel's certificate is refused: nothing is sent to it.
	noCA, err := connect.Redis(strings.Replace(u, "tls_ca_file="+r.caFile, "tls_ca_file="+r.wrongCAFile, 1))
	require.NoError(t, err)
	bad := asynq.NewClient(noCA)
	t.Cleanup(func() { _ = bad.Close() })
	err = bad.Ping()
	require.Error(t, err)
	require.NotContains(t, err.Error(), tlsRedisPassword)
}
