package netnstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/legation-io/legation/internal/testkit/testbase"
)

const (
	// defaultTestTimeout bounds what must happen.
	defaultTestTimeout = testbase.Timeout
	// defaultTestShortTimeout is how long a test waits for what must not
	// happen.
	defaultTestShortTimeout = 300 * time.Millisecond
)

// The main goroutine stays locked to the main thread (a LockOSThread in an
// init does that), so that TestMain can run functions there for the tests
// (onMainThread): DialContext's dialing goroutine may land on the main
// thread, and TestDialOnMainThread shows what it does there.
func init() { runtime.LockOSThread() }

// mainThread carries the functions onMainThread runs on the main thread.
var mainThread = make(chan func())

// onMainThread runs f on the main thread and returns when f has.
func onMainThread(f func()) {
	done := make(chan struct{})
	mainThread <- func() { defer close(done); f() }
	<-done
}

func TestMain(m *testing.M) {
	// The tests run on another goroutine; VerifyTestMain exits the
	// process when they are done and no goroutine leaked (this one,
	// serving mainThread, excepted).
	go goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/legation-io/legation/internal/testkit/netnstest.TestMain"))
	for f := range mainThread {
		f()
	}
}

// listen listens on TCP at ip, port 0, until the test ends.
func listen(t *testing.T, ip netip.Addr) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// exchange dials ln from ns, accepts, sends a line each way and returns
// the remote address the server saw.
func exchange(t *testing.T, ns *NS, ln net.Listener) netip.AddrPort {
	t.Helper()
	ctx := testbase.Context(t)
	c, err := ns.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := c.SetDeadline(time.Now().Add(defaultTestTimeout)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDeadline(time.Now().Add(defaultTestTimeout)); err != nil {
		t.Fatal(err)
	}
	// The connection is used here, on the test's goroutine, not the one
	// that dialed it.
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("server read %q, %v; want %q", buf, err, "ping\n")
	}
	if _, err := io.WriteString(s, "pong\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong\n" {
		t.Fatalf("client read %q, %v; want %q", buf, err, "pong\n")
	}
	if got, want := netip.MustParseAddrPort(c.LocalAddr().String()), s.RemoteAddr().String(); got.String() != want {
		t.Errorf("client's local address %s, server's remote address %s: want the same", got, want)
	}
	return netip.MustParseAddrPort(s.RemoteAddr().String())
}

func TestServerSeesPeerIP(t *testing.T) {
	ns := New(t)
	if !ns.HostIP().Is4() || !ns.PeerIP().Is4() || ns.HostIP() == ns.PeerIP() {
		t.Fatalf("HostIP %s, PeerIP %s: want two IPv4 addresses", ns.HostIP(), ns.PeerIP())
	}
	pool := netip.MustParsePrefix("10.251.0.0/16")
	if !pool.Contains(ns.HostIP()) || !pool.Contains(ns.PeerIP()) {
		t.Errorf("HostIP %s, PeerIP %s: want both in %s", ns.HostIP(), ns.PeerIP(), pool)
	}

	remote := exchange(t, ns, listen(t, ns.HostIP()))
	if remote.Addr() != ns.PeerIP() {
		t.Errorf("server saw the client at %s, want PeerIP %s", remote.Addr(), ns.PeerIP())
	}
	if remote.Addr().IsLoopback() {
		t.Errorf("server saw the client at %s, a loopback address", remote.Addr())
	}
}

func TestRootLoopbackUnreachable(t *testing.T) {
	ns := New(t)
	ln := listen(t, netip.MustParseAddr("127.0.0.1"))

	c, err := ns.DialContext(testbase.Context(t), "tcp", ln.Addr().String())
	if err == nil {
		c.Close()
		t.Fatalf("dial %s from the namespace succeeded: it reached the root namespace's loopback", ln.Addr())
	}
	t.Logf("dial from the namespace failed as it should: %v", err)

	// Nothing arrived at the root's listener either.
	if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(defaultTestShortTimeout)); err != nil {
		t.Fatal(err)
	}
	if s, err := ln.Accept(); err == nil {
		s.Close()
		t.Fatalf("the root's listener on %s accepted a connection from %s", ln.Addr(), s.RemoteAddr())
	}
}

func TestHTTPClient(t *testing.T) {
	ns := New(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.RemoteAddr)
	}))
	srv.Listener.Close()
	srv.Listener = listen(t, ns.HostIP())
	srv.Start()
	defer srv.Close()

	req, err := http.NewRequestWithContext(testbase.Context(t), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ns.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	remote, err := netip.ParseAddrPort(string(body))
	if err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if remote.Addr() != ns.PeerIP() {
		t.Errorf("server saw the client at %s, want PeerIP %s", remote.Addr(), ns.PeerIP())
	}
}

func TestGRPCDialer(t *testing.T) {
	ns := New(t)
	var (
		mu    sync.Mutex // guards peers
		peers []string   // the client addresses of the calls the server got
	)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			mu.Lock()
			peers = append(peers, p.Addr.String())
			mu.Unlock()
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln := listen(t, ns.HostIP())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(ns.GRPCDialer()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(testbase.Context(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.GetStatus(), healthpb.HealthCheckResponse_SERVING; got != want {
		t.Errorf("health %s, want %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(peers) != 1 {
		t.Fatalf("server saw calls from %v, want one", peers)
	}
	if got := netip.MustParseAddrPort(peers[0]).Addr(); got != ns.PeerIP() {
		t.Errorf("server saw the call from %s, want PeerIP %s", got, ns.PeerIP())
	}
}

// TestUnplug: once unplugged, what the root side writes on a connection
// from the namespace never arrives, and no new connection can be made;
// before it, the same connection carries a line (so the first half can
// fail).
func TestUnplug(t *testing.T) {
	ns := New(t)
	ln := listen(t, ns.HostIP())
	c, err := ns.DialContext(testbase.Context(t), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, 5)
	roundTrip := func() error {
		if _, err := io.WriteString(s, "pong\n"); err != nil {
			return err
		}
		if err := c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		_, err := io.ReadFull(c, buf)
		return err
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("before Unplug: %v", err)
	}
	ns.Unplug(t)
	if err := roundTrip(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Unplug the client read %q, %v; want nothing until the deadline", buf, err)
	}
	ctx, cancel := context.WithTimeout(testbase.Context(t), 500*time.Millisecond)
	defer cancel()
	if c2, err := ns.DialContext(ctx, "tcp", ln.Addr().String()); err == nil {
		c2.Close()
		t.Fatal("after Unplug a dial from the namespace succeeded")
	}
}

func TestDialContextRejects(t *testing.T) {
	ns := New(t)
	ctx := testbase.Context(t)
	for _, tc := range []struct{ network, addr string }{
		{"tcp", "localhost:80"},             // a name: resolved outside
		{"tcp", net.JoinHostPort("", "80")}, // no host
		{"unix", "/tmp/x.sock"},
		{"tcp", "10.251.0.1"}, // no port
	} {
		t.Run(tc.network+" "+tc.addr, func(t *testing.T) {
			c, err := ns.DialContext(ctx, tc.network, tc.addr)
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded, want an error")
			}
		})
	}
}

func TestDialContextCanceled(t *testing.T) {
	ns := New(t)
	ln := listen(t, ns.HostIP())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := ns.DialContext(ctx, "tcp", ln.Addr().String())
	if err == nil {
		c.Close()
		t.Fatal("dial with a canceled context succeeded")
	}
}

func TestSeveral(t *testing.T) {
	const n = 4
	var all []*NS
	for range n {
		all = append(all, New(t))
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.Name() == b.Name() {
				t.Errorf("two namespaces named %s", a.Name())
			}
			if a.prefix.Overlaps(b.prefix) {
				t.Errorf("%s has %s, %s has %s: they overlap", a.Name(), a.prefix, b.Name(), b.prefix)
			}
		}
	}
	lns := make([]net.Listener, n)
	for i, ns := range all {
		lns[i] = listen(t, ns.HostIP())
	}
	for i, ns := range all {
		if remote := exchange(t, ns, lns[i]); remote.Addr() != ns.PeerIP() {
			t.Errorf("%s: server saw the client at %s, want %s", ns.Name(), remote.Addr(), ns.PeerIP())
		}
		// A namespace reaches its own host end only, not another's.
		other := lns[(i+1)%n]
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestShortTimeout)
		c, err := ns.DialContext(ctx, "tcp", other.Addr().String())
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("%s reached %s, another namespace's host end", ns.Name(), other.Addr())
		}
	}
}

func TestParallel(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			ns := New(t)
			if remote := exchange(t, ns, listen(t, ns.HostIP())); remote.Addr() != ns.PeerIP() {
				t.Errorf("server saw the client at %s, want %s", remote.Addr(), ns.PeerIP())
			}
		})
	}
}

func TestCleanupRemoves(t *testing.T) {
	ip, err := ipPath()
	if err != nil {
		t.Fatal(err)
	}
	var ns *NS
	t.Run("make", func(t *testing.T) {
		ns = New(t)
		if !strings.Contains(netnsList(t, ip), ns.Name()) {
			t.Fatalf("ip netns list does not show %s", ns.Name())
		}
		// A connection still open when the cleanup runs.
		ln := listen(t, ns.HostIP())
		c, err := ns.DialContext(testbase.Context(t), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	})
	if t.Failed() {
		return
	}
	if list := netnsList(t, ip); strings.Contains(list, ns.Name()) {
		t.Errorf("ip netns list still shows %s after cleanup:\n%s", ns.Name(), list)
	}
	if _, err := net.InterfaceByName(ns.hostLink); err == nil {
		t.Errorf("link %s still exists after cleanup", ns.hostLink)
	}
	if use, err := prefixUse(ip, ns.prefix, ""); err != nil {
		t.Fatal(err)
	} else if use != "" {
		t.Errorf("%s still in use after cleanup: %s", ns.prefix, use)
	}
	if _, err := ns.DialContext(testbase.Context(t), "tcp", netip.AddrPortFrom(ns.HostIP(), 80).String()); err == nil {
		t.Errorf("DialContext after cleanup succeeded")
	}
}

func netnsList(t *testing.T, ip string) string {
	t.Helper()
	out, err := exec.Command(ip, "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	return string(out)
}

// TestNoThreadStaysInside checks that the threads that dialed from inside
// a namespace end: soon after the dials, every thread of the process is in
// the root namespace again.
func TestNoThreadStaysInside(t *testing.T) {
	root, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	ns := New(t)
	ln := listen(t, ns.HostIP())
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			s.Close()
		}
	}()
	ctx := testbase.Context(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			c, err := ns.DialContext(ctx, "tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			c.Close()
		})
	}
	wg.Wait()

	deadline := time.Now().Add(defaultTestTimeout)
	for {
		inside := threadsOutside(t, root)
		if len(inside) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v are still outside the root namespace %s", inside, root)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// threadsOutside lists the threads of the process whose network namespace
// is not root, with theirs.
func threadsOutside(t *testing.T, root string) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range tasks {
		l, err := os.Readlink(p)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if l != root {
			out = append(out, p+" -> "+l)
		}
	}
	return out
}

// TestDialOnMainThread checks that a dial whose goroutine runs on the main
// thread leaves the main thread in the root namespace: the runtime cannot
// end the main thread, so it must never join the namespace.
func TestDialOnMainThread(t *testing.T) {
	ns := New(t)
	ln := listen(t, ns.HostIP())
	ctx := testbase.Context(t)
	var (
		onMain              bool
		before, after       string
		errBefore, errAfter error
		r                   dialResult
	)
	onMainThread(func() {
		onMain = unix.Gettid() == unix.Getpid()
		before, errBefore = os.Readlink("/proc/thread-self/ns/net")
		ch := make(chan dialResult, 1)
		ns.dialInside(ctx, "tcp", ln.Addr().String(), ch)
		r = <-ch
		after, errAfter = os.Readlink("/proc/thread-self/ns/net")
	})
	if !onMain {
		t.Fatal("onMainThread did not run on the main thread")
	}
	if errBefore != nil || errAfter != nil {
		t.Fatalf("reading the main thread's namespace: %v, %v", errBefore, errAfter)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.conn.Close()
	if before != after {
		t.Errorf("the main thread's namespace was %s before the dial, %s after", before, after)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := netip.MustParseAddrPort(s.RemoteAddr().String()).Addr(); got != ns.PeerIP() {
		t.Errorf("server saw the client at %s, want PeerIP %s", got, ns.PeerIP())
	}
	// The main thread still runs what it is given.
	ran := false
	onMainThread(func() { ran = true })
	if !ran {
		t.Error("the main thread no longer runs functions after the dial")
	}
}

func TestSlotPrefix(t *testing.T) {
	for _, tc := range []struct {
		slot uint32
		want string
	}{
		{0, "10.251.0.0/30"},
		{1, "10.251.0.4/30"},
		{63, "10.251.0.252/30"},
		{64, "10.251.1.0/30"},
		{poolSlots - 1, "10.251.255.252/30"},
		{poolSlots, "10.251.0.0/30"},
	} {
		if got := slotPrefix(tc.slot); got.String() != tc.want {
			t.Errorf("slotPrefix(%d) = %s, want %s", tc.slot, got, tc.want)
		}
	}
}

// TestPrefixInUse checks that a /30 a namespace holds is seen in use, and
// skipped when a search for a free one starts there.
func TestPrefixInUse(t *testing.T) {
	ip, err := ipPath()
	if err != nil {
		t.Fatal(err)
	}
	ns := New(t)
	use, err := prefixUse(ip, ns.prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(use, ns.hostLink) {
		t.Errorf("prefixUse(%s) = %q, want it to name %s", ns.prefix, use, ns.hostLink)
	}
	if use, err := prefixUse(ip, ns.prefix, ns.hostLink); err != nil || use != "" {
		t.Errorf("prefixUse(%s) but for %s = %q, %v; want nothing", ns.prefix, ns.hostLink, use, err)
	}
	b := ns.prefix.Addr().As4()
	slot := uint32(b[2])<<6 | uint32(b[3])>>2
	if slotPrefix(slot) != ns.prefix {
		t.Fatalf("slot %d is %s, want %s", slot, slotPrefix(slot), ns.prefix)
	}
	got, err := freePrefix(ip, slot)
	if err != nil {
		t.Fatal(err)
	}
	if got.Overlaps(ns.prefix) {
		t.Errorf("freePrefix from slot %d = %s, which %s holds", slot, got, ns.Name())
	}
}
