package faultnet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echoServer echoes every line back until the test ends.
func echoServer(t *testing.T) string { t.Helper(); return echoServerAt(t, "127.0.0.1:0") }

// echoServerAt is echoServer on addr.
func echoServerAt(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go io.Copy(c, c) //nolint:errcheck // ends when c closes
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c, bufio.NewReader(c)}
}

// roundTrip sends a line and waits up to wait for its echo.
func (cl *client) roundTrip(line string, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	cl.c.SetDeadline(start.Add(wait)) //nolint:errcheck // a test socket
	if _, err := io.WriteString(cl.c, line+"\n"); err != nil {
		return 0, err
	}
	got, err := cl.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if got != line+"\n" {
		return 0, errors.New("echo: got " + got)
	}
	return time.Since(start), nil
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPass(t *testing.T) {
	p := newProxy(t)
	cl := dial(t, p.Addr())
	if _, err := cl.roundTrip("hello", 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDelay(t *testing.T) {
	p := newProxy(t)
	cl := dial(t, p.Addr())
	if _, err := cl.roundTrip("warm", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Set(Fault{Mode: Delay, Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond})
	// Each way is delayed: at least twice the fixed part, on the live
	// connection.
	took, err := cl.roundTrip("slow", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 200*time.Millisecond {
		t.Errorf("round trip under delay 100ms took %s, want at least 200ms", took)
	}
	p.Set(Fault{Mode: Pass})
	took, err = cl.roundTrip("fast", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took > 100*time.Millisecond {
		t.Errorf("round trip after pass took %s", took)
	}
}

func TestDrop(t *testing.T) {
	p := newProxy(t)
	cl := dial(t, p.Addr())
	if _, err := cl.roundTrip("a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Set(Fault{Mode: Drop})
	if _, err := cl.roundTrip("b", 2*time.Second); err == nil {
		t.Fatal("live connection works after Drop")
	}
	if _, err := dial(t, p.Addr()).roundTrip("c", 2*time.Second); err == nil {
		t.Fatal("new connection works under Drop")
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns under Drop = %d", n)
	}
	p.Set(Fault{Mode: Pass})
	if _, err := dial(t, p.Addr()).roundTrip("d", 2*time.Second); err != nil {
		t.Fatalf("after Pass: %v", err)
	}
}

func TestBlackhole(t *testing.T) {
	p := newProxy(t)
	live := dial(t, p.Addr())
	if _, err := live.roundTrip("a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Set(Fault{Mode: Blackhole})
	// Both the live connection and a new one stall: no error, no echo.
	fresh := dial(t, p.Addr())
	for name, cl := range map[string]*client{"live": live, "new": fresh} {
		_, err := cl.roundTrip("held-"+name, 300*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s connection under Blackhole: %v, want a timeout", name, err)
		}
	}
	// Healed, what was held goes through.
	p.Set(Fault{Mode: Pass})
	for name, cl := range map[string]*client{"live": live, "new": fresh} {
		cl.c.SetDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck // a test socket
		got, err := cl.r.ReadString('\n')
		if err != nil || got != "held-"+name+"\n" {
			t.Fatalf("%s connection after heal: %q, %v", name, got, err)
		}
		if _, err := cl.roundTrip("after", 2*time.Second); err != nil {
			t.Fatalf("%s connection after heal: %v", name, err)
		}
	}
	// Blackhole then Drop closes what was held.
	p.Set(Fault{Mode: Blackhole})
	p.Set(Fault{Mode: Drop})
	if _, err := live.roundTrip("x", 2*time.Second); err == nil {
		t.Fatal("connection works after Blackhole then Drop")
	}
}

func TestCloseEndsEverything(t *testing.T) {
	p := newProxy(t)
	cl := dial(t, p.Addr())
	p.Set(Fault{Mode: Blackhole})
	io.WriteString(cl.c, "held\n") //nolint:errcheck // a test socket
	dial(t, p.Addr())
	time.Sleep(50 * time.Millisecond)
	p.Close()
	p.Close()
	if _, err := cl.roundTrip("x", 2*time.Second); err == nil {
		t.Fatal("connection works after Close")
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("proxy accepts after Close")
	}
}

// TestSwitchingKeepsTheStream: modes switched under a stream in flight
// (pass, delay, blackhole, never drop) lose, reorder or duplicate nothing.
func TestSwitchingKeepsTheStream(t *testing.T) {
	p := newProxy(t)
	cl := dial(t, p.Addr())
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	cl.c.SetDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck // a test socket
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(cl.r, int64(len(want))))
		got <- b
	}()
	wrote := make(chan error, 1)
	go func() {
		// In chunks, a while apart: the stream lasts through many switches.
		for off := 0; off < len(want); off += 16 << 10 {
			if _, err := cl.c.Write(want[off : off+16<<10]); err != nil {
				wrote <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		wrote <- nil
	}()
	modes := []Fault{{Mode: Delay, Delay: time.Millisecond, Jitter: time.Millisecond}, {Mode: Blackhole}, {Mode: Pass}}
	timeout := time.After(30 * time.Second)
	for n := 0; ; n++ {
		select {
		case b := <-got:
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("after %d switches: %d bytes back, not what was sent", n, len(b))
			}
			if n < 10 {
				t.Fatalf("only %d switches during the stream", n)
			}
			t.Logf("1 MiB intact through %d switches", n)
			return
		case <-timeout:
			t.Fatal("the stream did not finish")
		case <-time.After(5 * time.Millisecond):
			p.Set(modes[n%len(modes)])
		}
	}
}
