package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// startUI runs `bunbox ui` on a free address until the test ends and returns the address once it serves.
func startUI(t *testing.T, env map[string]string, args ...string) (addr string, stdout *syncBuffer) {
	t.Helper()
	addr = freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	stdout = &syncBuffer{}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"ui", "-addr", addr, "-redis=false"}, args...), getenvOf(t, env), stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, 0, <-done, stderr.String())
	})
	outboxtest.WaitFor(t, 10*time.Second, "bunbox ui serves", func() bool {
		code, _ := get(t, "http://"+addr+"/assets/ui.css")
		return code == http.StatusOK
	})
	return addr, stdout
}

// TestUIGuardsReadsWithToken: with BUNBOX_UI_TOKEN, `bunbox ui` asks for the token on every page (basic
// auth opens it), and says so; -open-reads opens the reads.
func TestUIGuardsReadsWithToken(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, _ := schemaEnv(t)
	env[uiTokenEnv] = "s3cret-ui-token-for-tests"
	addr, stdout := startUI(t, env)
	require.Contains(t, stdout.String(), "every page asks for BUNBOX_UI_TOKEN")
	code, body := get(t, "http://"+addr+"/")
	require.Equal(t, http.StatusUnauthorized, code, body)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", env[uiTokenEnv])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	open, stdout := startUI(t, env, "-open-reads", "-trust-proxy")
	require.Contains(t, stdout.String(), "reads open to whoever reaches it")
	code, body = get(t, "http://"+open+"/")
	require.Equal(t, http.StatusOK, code, body)
}

// TestUICutsSlowBody: `bunbox ui` bounds how long a request's body may take (its read timeout): a client
// that sends headers and then trickles its body has its connection answered and closed within the
// timeout, not held.
func TestUICutsSlowBody(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, _ := schemaEnv(t)
	env[uiTokenEnv] = "s3cret-ui-token-for-tests"
	addr, _ := startUI(t, env)

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, "POST /login HTTP/1.1\r\nHost: "+addr+"\r\nSec-Fetch-Site: same-origin\r\n"+
		"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=s3")
	require.NoError(t, err)
	// The rest of the body never comes. Wait for the server's answer well past the timeout.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(uiReadTimeout+15*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answered before the client's deadline")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "the form could not be read")
	require.Less(t, took, uiReadTimeout+5*time.Second)
	require.GreaterOrEqual(t, took, uiReadTimeout-time.Second, "the body had its read timeout to arrive")
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection is closed")
	require.False(t, strings.Contains(resp.Header.Get("Set-Cookie"), "bunbox"), "no session from a cut sign-in")
}
