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
	l := newConnTracker(ln, connKeepalive{Idle: 5 * time.Second, Timeout: 2 * time.Second}, 0, slog.New(slog.DiscardHandler))
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
	opt := func(name string, o int) int {
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, o) }); err != nil || gerr != nil {
			t.Fatal(name, err, gerr)
		}
		return v
	}
	idle := opt("TCP_KEEPIDLE", unix.TCP_KEEPIDLE)
	if idle != 4 && idle != 5 {
		t.Errorf("TCP_KEEPIDLE %ds, want 5s less up to a tenth (4s or 5s in whole seconds)", idle)
	}
	if got := opt("TCP_KEEPINTVL", unix.TCP_KEEPINTVL); got != 1 {
		t.Errorf("TCP_KEEPINTVL %ds, want 1s (2s for 3 probes, in whole seconds)", got)
	}
	if got := opt("TCP_KEEPCNT", unix.TCP_KEEPCNT); got != 3 {
		t.Errorf("TCP_KEEPCNT %d, want 3", got)
	}
	if ms := opt("TCP_USER_TIMEOUT", unix.TCP_USER_TIMEOUT); ms != (idle+2)*1000 {
		t.Errorf("TCP_USER_TIMEOUT %dms, want %dms (the idle time and the timeout)", ms, (idle+2)*1000)
	}
}

// TestKeepaliveJitter: connections' idle times spread over a tenth
// either side of --keepalive-time, so that connections that went quiet
// together are not probed in one burst; whole seconds, at least 1s.
func TestKeepaliveJitter(t *testing.T) {
	k := connKeepalive{Idle: 30 * time.Second, Timeout: 10 * time.Second}
	for _, tc := range []struct {
		jitter   float64
		idle, ut time.Duration
	}{
		{0, 27 * time.Second, 37 * time.Second},
		{0.5, 30 * time.Second, 40 * time.Second},
		{0.999, 32 * time.Second, 42 * time.Second},
	} {
		ka, ut := k.config(tc.jitter)
		if ka.Idle != tc.idle || ut != tc.ut || ka.Interval != 3*time.Second || ka.Count != 3 || !ka.Enable {
			t.Errorf("config(%v) = %+v, %v; want idle %v, interval 3s, 3 probes, user timeout %v", tc.jitter, ka, ut, tc.idle, tc.ut)
		}
	}
	if ka, ut := (connKeepalive{Idle: time.Second, Timeout: time.Second}).config(0); ka.Idle != time.Second || ka.Interval != time.Second || ut != 2*time.Second {
		t.Errorf("1s, 1s: %+v, %v; want idle and interval 1s at least, user timeout 2s", ka, ut)
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
	l := newConnTracker(ln, connKeepalive{Idle: time.Second, Timeout: time.Second}, 0, slog.New(slog.DiscardHandler))
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
