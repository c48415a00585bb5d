package connect

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// The TCP bounds of every PostgreSQL connection Postgres opens, on both drivers: a peer that went silent
// (a network partition, a host that died without closing) is given up on within about 30 s, instead of the
// operating system's defaults (keepalive probes after 2 hours; about 15 minutes of retransmissions for data
// never acknowledged). The client then sees an error, its pool opens a new connection, and the session the
// server kept is ended by the server's own bounds (the relay sets them in each of its transactions).
const (
	// keepAliveIdle is how long a connection is idle before the first keepalive probe.
	keepAliveIdle = 15 * time.Second
	// keepAliveInterval is the time between probes.
	keepAliveInterval = 5 * time.Second
	// keepAliveCount is how many unanswered probes close the connection: 15 s + 3 × 5 s = 30 s.
	keepAliveCount = 3
	// tcpUserTimeout is how long data sent may stay unacknowledged before the connection is closed
	// (TCP_USER_TIMEOUT, Linux only).
	tcpUserTimeout = 30 * time.Second
)

// dialFunc is the shape of pgdriver's Config.Dialer and pgx's Config.DialFunc.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// withTCPBounds wraps dial so that the TCP connections it returns carry the keepalive and user-timeout
// bounds above. A connection over a Unix socket is returned as it is.
func withTCPBounds(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := boundTCP(conn); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// boundTCP sets the bounds on conn's TCP connection, under TLS if need be.
func boundTCP(conn net.Conn) error {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	if err := tcp.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount,
	}); err != nil {
		return err
	}
	return setUserTimeout(tcp, tcpUserTimeout)
}
