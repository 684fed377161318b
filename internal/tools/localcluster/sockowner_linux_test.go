package localcluster

import (
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
	first, second := listen(), listen()
	// The first connection closes from the client's side, which leaves
	// the client's end in TIME_WAIT.
	c1, err := reuse.Dial("tcp", first.Addr().String())
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
	// The second, from the same local port to another listener.
	reuse.LocalAddr = local
	c2, err := reuse.Dial("tcp", second.Addr().String())
	if err != nil {
		t.Fatalf("dial from %s again: %v", local, err)
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
