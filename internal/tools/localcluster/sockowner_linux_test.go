package localcluster

import (
	"net"
	"os"
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
