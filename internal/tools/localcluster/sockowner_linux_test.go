package localcluster

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestSocketOwner: the owner of a connection's client end, which a gossip
// proxy sees as the remote address, is found among pids, and only there.
func TestSocketOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	remote := s.RemoteAddr().(*net.TCPAddr)
	if got := socketOwner(remote, []int{1, os.Getpid()}); got != os.Getpid() {
		t.Errorf("socketOwner(%s) = %d, want this process, %d", remote, got, os.Getpid())
	}
	if got := socketOwner(remote, []int{1}); got != 0 {
		t.Errorf("socketOwner(%s) among pid 1 = %d, want 0", remote, got)
	}
	if got := socketOwner(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, []int{os.Getpid()}); got != 0 {
		t.Errorf("socketOwner of no socket = %d", got)
	}
}

// TestSocketOwnerPortReused: a connection whose local port a closed one
// used before is still found, though the closed one lingers in
// /proc/net/tcp in TIME_WAIT, owned by no process.
func TestSocketOwnerPortReused(t *testing.T) {
	reuse := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	// Another process on the machine may take the freed port between the
	// two dials (the kernel hands it out again as an ephemeral port), so
	// the pair is tried again with a fresh port when that happens.
	var local *net.TCPAddr
	var c2 net.Conn
	var second net.Listener
	for attempt := 1; c2 == nil; attempt++ {
		var err error
		local, second = closedPort(t, reuse, listen), listen()
		d := reuse
		d.LocalAddr = local
		c2, err = d.Dial("tcp", second.Addr().String())
		if err != nil && (!errors.Is(err, syscall.EADDRINUSE) || attempt == 5) {
			t.Fatalf("dial from %s again (attempt %d): %v", local, attempt, err)
		}
	}
	defer c2.Close()
	s2, err := second.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := socketOwner(local, []int{os.Getpid()}); got != os.Getpid() {
		t.Errorf("socketOwner(%s), its port used before = %d, want this process, %d", local, got, os.Getpid())
	}
}

// closedPort makes a connection to a fresh listener and closes it from the
// client's side, which leaves the client's end in TIME_WAIT, and returns
// that end's address.
func closedPort(t *testing.T, d net.Dialer, listen func() net.Listener) *net.TCPAddr {
	t.Helper()
	first := listen()
	c1, err := d.Dial("tcp", first.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s1, err := first.Accept()
	if err != nil {
		t.Fatal(err)
	}
	local := c1.LocalAddr().(*net.TCPAddr)
	c1.Close()
	buf := make([]byte, 1)
	_, _ = s1.Read(buf) // the client's FIN
	s1.Close()
	return local
}
