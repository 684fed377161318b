package replica

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets c's TCP_USER_TIMEOUT to d: the longest data sent on
// it may stay unacknowledged (and, with keepalive on, the longest the
// connection may go unheard once a probe is out) before the kernel closes
// it.
func setUserTimeout(c *net.TCPConn, d time.Duration) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}
