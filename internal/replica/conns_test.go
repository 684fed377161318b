package replica

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUserTimeout: each connection the tracker accepts has the
// TCP_USER_TIMEOUT it was given (the kernel's own default is 0: data may
// stay unacknowledged for the whole retransmission schedule, some 15
// minutes).
func TestUserTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnTracker(ln, 7*time.Second, 0, slog.New(slog.DiscardHandler))
	defer l.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*trackedConn).Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if ms != 7000 {
		t.Errorf("TCP_USER_TIMEOUT %dms, want 7000ms", ms)
	}
}
