package replica_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// idleConn opens a connection to addr from local (nil: any), makes one
// keep-alive request for /healthz on it and leaves it open, idle; it is
// closed when the test ends.
func idleConn(t *testing.T, addr string, local net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // the read fails instead
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("keep-alive /healthz: %v", err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // the status is what counts
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("keep-alive /healthz: %s, close %v", resp.Status, resp.Close)
	}
	return c
}

// healthzWithin GETs /healthz on a new connection and fails the test
// unless it answers 200 within d.
func healthzWithin(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: d}
	start := time.Now()
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz on a new connection: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	t.Logf("/healthz answered in %s", time.Since(start).Round(time.Millisecond))
}

// TestHTTPIdleConnsDoNotBlockProbes: 1,000 idle keep-alive connections
// on --http-addr do not make /healthz on a new connection wait: an idle
// one is closed to make room, whether the bound reached is the client
// IP's or the port's.
func TestHTTPIdleConnsDoNotBlockProbes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*replica.Config)
		evict float64 // at least, for the 1,000 idle and the probe
	}{
		{"defaults", func(*replica.Config) {}, 900},
		{"no per-IP bound", func(c *replica.Config) { c.HTTPMaxConnsPerIP = 0 }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			_, r, reg := limitsEnv(t, tc.edit)
			for range 1000 {
				idleConn(t, r.HTTPAddr(), nil)
			}
			healthzWithin(t, r.HTTPAddr(), 2*time.Second)
			if got := metricValue(t, reg, "legation_http_idle_conns_closed_total"); got < tc.evict {
				t.Errorf("legation_http_idle_conns_closed_total = %v, want at least %v", got, tc.evict)
			}
		})
	}
}

// TestHTTPMaxConnsPerIP: a client IP holding --http-max-conns-per-ip
// connections, none idle, is refused one more with a 503 naming the flag
// (and counted); another IP is served.
func TestHTTPMaxConnsPerIP(t *testing.T) {
	checkLeaks(t)
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.HTTPMaxConnsPerIP = 2 })
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	d := net.Dialer{LocalAddr: other, Timeout: 5 * time.Second}
	for range 2 {
		c, err := d.Dial("tcp", r.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// A request begun, not finished: active, not idle.
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	xdstest.WaitFor(t, "the two connections of 127.0.0.2 open", func() (bool, string) {
		n := metricValue(t, reg, "legation_http_conns")
		return n >= 2, ""
	})
	c, err := d.Dial("tcp", r.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // the read fails instead
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a third connection from 127.0.0.2: %v, want a 503", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "--http-max-conns-per-ip") {
		t.Errorf("a third connection from 127.0.0.2: %s %q, want 503 naming --http-max-conns-per-ip", resp.Status, body)
	}
	if got := metricValue(t, reg, "legation_http_conns_refused_total"); got != 1 {
		t.Errorf("legation_http_conns_refused_total = %v, want 1", got)
	}
	healthzWithin(t, r.HTTPAddr(), 2*time.Second) // from 127.0.0.1
}

// TestProbeListener: with --probe-addr, /healthz and /readyz answer
// there, in plain HTTP, while --http-addr is full of connections that
// are not idle; nothing else is served there.
func TestProbeListener(t *testing.T) {
	checkLeaks(t)
	_, r, _ := limitsEnv(t, func(c *replica.Config) {
		c.ProbeAddr = "127.0.0.1:0"
		c.HTTPMaxConns, c.HTTPMaxConnsPerIP = 2, 0
	})
	if r.ProbeAddr() == "" {
		t.Fatal("no probe listener with --probe-addr")
	}
	for range 2 { // --http-addr full: requests begun, never finished
		c, err := net.Dial("tcp", r.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	healthzWithin(t, r.ProbeAddr(), 2*time.Second)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	for path, want := range map[string]int{"/readyz": http.StatusOK, "/metrics": http.StatusNotFound, "/debug/view": http.StatusNotFound} {
		resp, err := c.Get("http://" + r.ProbeAddr() + path)
		if err != nil {
			t.Fatalf("%s on --probe-addr: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s on --probe-addr: %s, want %d", path, resp.Status, want)
		}
	}
}

// TestHTTPIdleConnsClosedOverTLS: with TLS on --http-addr, idle
// keep-alive connections are seen through the TLS layer and closed to
// make room, as in plaintext.
func TestHTTPIdleConnsClosedOverTLS(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	k := newMTLSKit(t)
	k.grant(t, e)
	cfg := e.config(t)
	cfg.Standalone = true
	cfg.HTTPMaxConns, cfg.HTTPMaxConnsPerIP = 2, 0
	k.configure(&cfg)
	r := start(t, cfg)
	k.waitReady(t, r)
	for range 2 {
		c, err := tls.Dial("tcp", r.HTTPAddr(), k.tls(t, ""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	start := time.Now()
	if code, body := k.get(t, r, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz over TLS with 2 idle connections at --http-max-conns 2: %d %s", code, body)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("/healthz took %s with --http-max-conns taken by idle connections", took)
	}
	if got := metricValue(t, cfg.Registerer, "legation_http_idle_conns_closed_total"); got < 1 {
		t.Errorf("legation_http_idle_conns_closed_total = %v, want at least 1", got)
	}
}
