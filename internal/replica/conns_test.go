package replica

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/mem"
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
	rc, ok := c.(*readyConn)
	if !ok {
		t.Fatalf("accepted %T, want a *readyConn (gRPC reads it on readiness)", c)
	}
	raw, err := rc.Conn.(*net.TCPConn).SyscallConn()
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

// TestReadyConn: ReadOnReady reads what the peer wrote into a buffer of
// the pool, puts nothing back it handed out, and says io.EOF once the
// peer has closed.
func TestReadyConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnTracker(ln, time.Second, 0, slog.New(slog.DiscardHandler))
	defer l.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := c.(*readyConn)
	pool := &countingPool{BufferPool: mem.DefaultBufferPool()}
	go func() {
		time.Sleep(50 * time.Millisecond) // the read waits for readiness first
		cc.Write([]byte("hello"))         //nolint:errcheck // the read below checks it
		cc.Close()
	}()
	buf, n, err := rc.ReadOnReady(4096, pool)
	if err != nil || string((*buf)[:n]) != "hello" {
		t.Fatalf("ReadOnReady = %q, %v; want hello", (*buf)[:n], err)
	}
	pool.Put(buf)
	if _, _, err := rc.ReadOnReady(4096, pool); err != io.EOF {
		t.Errorf("ReadOnReady after the peer closed: %v, want io.EOF", err)
	}
	if pool.out != 0 {
		t.Errorf("%d buffers of the pool not put back", pool.out)
	}
}

// countingPool counts the buffers it handed out and has not had back.
type countingPool struct {
	mem.BufferPool
	out int
}

func (p *countingPool) Get(n int) *[]byte { p.out++; return p.BufferPool.Get(n) }
func (p *countingPool) Put(b *[]byte)     { p.out--; p.BufferPool.Put(b) }
