package connect

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeoutOpt is TCP_USER_TIMEOUT (linux/tcp.h), which package syscall does not name.
const tcpUserTimeoutOpt = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT on conn: data unacknowledged for d closes the connection.
func setUserTimeout(conn *net.TCPConn, d time.Duration) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeoutOpt, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}
