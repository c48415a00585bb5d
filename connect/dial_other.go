//go:build !linux

package connect

import (
	"net"
	"time"
)

// setUserTimeout does nothing outside Linux: the keepalive bounds remain.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
