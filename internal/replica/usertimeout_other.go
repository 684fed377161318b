//go:build !linux

package replica

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: there
// a dead peer is found by the kernel's keepalive once the connection is
// idle, and by the HTTP/2 pings (--ping-time).
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
