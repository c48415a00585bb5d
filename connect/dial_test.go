//go:build linux

package connect_test

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/connect"
)

// TestPostgresConnectorBoundsTCP: the connections pgdriver dials through the connector of Postgres carry the
// keepalive and TCP_USER_TIMEOUT bounds, so that a silent peer is given up on within about 30 s.
func TestPostgresConnectorBoundsTCP(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:]) // until the client closes
		}
	}()
	c, err := connect.PostgresConnectorForTest("postgres://app@"+ln.Addr().String()+"/app?sslmode=disable", nil)
	require.NoError(t, err)
	conn, err := c.Config().Dialer(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	get := func(level, opt int) int {
		var v int
		var gerr error
		require.NoError(t, raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }))
		require.NoError(t, gerr)
		return v
	}
	require.Equal(t, 1, get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE))
	require.Equal(t, 15, get(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE))
	require.Equal(t, 5, get(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL))
	require.Equal(t, 3, get(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT))
	require.Equal(t, 30000, get(syscall.IPPROTO_TCP, 0x12), "TCP_USER_TIMEOUT in ms")
}
