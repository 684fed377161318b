package replica

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpConns is the HTTP port's listener. It bounds the connections open
// at once (--http-max-conns) and those of one client IP
// (--http-max-conns-per-ip), and makes room for a new connection by
// closing an idle keep-alive one rather than making it wait: idle
// clients, however many, cannot lock out a probe, a scrape or a poll.
//
//   - Over the per-IP bound, one of that IP's idle connections is closed;
//     if it has none, the new connection is refused at once (plaintext: a
//     503 naming the flag; TLS: closed).
//   - Over the global bound, the connection idle longest is closed; if
//     none is idle, the new connection waits in Accept (and the listen
//     queue behind it) until one closes.
//
// Idleness comes from the HTTP server (trackState, its ConnState hook).
// Its methods may be called concurrently.
type httpConns struct {
	net.Listener
	max, perIP int
	tls        bool
	log        *slog.Logger

	mu     sync.Mutex // guards the fields below; never held while closing a connection
	cond   *sync.Cond // signalled when a connection closes, or the listener does
	open   map[*httpConn]struct{}
	byIP   map[netip.Addr]int
	closed bool

	refused  prometheus.Counter
	evicted  prometheus.Counter
	lastWarn atomic.Int64 // unix nanoseconds of the last warning of a refusal
}

// httpConn is one accepted connection.
type httpConn struct {
	net.Conn
	l     *httpConns
	ip    netip.Addr
	once  sync.Once
	idle  atomic.Int64 // unix nanoseconds it turned idle; 0 while new or active
	asked atomic.Bool  // the listener is closing it to make room
}

func (c *httpConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// newHTTPConns wraps l. max and perIP are bounds (0: none); tls says
// whether the server speaks TLS on it (a refusal is then a close, not a
// 503). It registers its metrics on reg.
func newHTTPConns(l net.Listener, max, perIP int, tls bool, reg prometheus.Registerer, log *slog.Logger) (*httpConns, error) {
	h := &httpConns{
		Listener: l, max: max, perIP: perIP, tls: tls, log: log,
		open: map[*httpConn]struct{}{}, byIP: map[netip.Addr]int{},
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_http_conns_refused_total",
			Help: "Connections to --http-addr refused because their client IP had --http-max-conns-per-ip open, none of them idle.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_http_idle_conns_closed_total",
			Help: "Idle keep-alive connections to --http-addr closed to make room for a new one (--http-max-conns, --http-max-conns-per-ip).",
		}),
	}
	h.cond = sync.NewCond(&h.mu)
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "legation_http_conns",
		Help: "Connections open on --http-addr.",
	}, func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(len(h.open))
	})
	for _, c := range []prometheus.Collector{h.refused, h.evicted, open} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("node: register metrics: %w", err)
		}
	}
	return h, nil
}

// Accept returns the next connection within the bounds, making room or
// refusing as the type's comment says.
func (h *httpConns) Accept() (net.Conn, error) {
	for {
		c, err := h.Listener.Accept()
		if err != nil {
			return nil, err
		}
		hc := &httpConn{Conn: c, l: h, ip: remoteIP(c)}
		admitted, err := h.admit(hc)
		if err != nil {
			c.Close()
			return nil, err
		}
		if !admitted {
			h.refuse(c, hc.ip)
			continue
		}
		return hc, nil
	}
}

// admit takes a place for c, closing idle connections to make room and
// waiting for one to close if none is idle; false: c's IP is at its bound
// with nothing idle. It fails once the listener is closed.
func (h *httpConns) admit(c *httpConn) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if h.closed {
			return false, net.ErrClosed
		}
		var victim *httpConn
		switch {
		case h.perIP > 0 && h.byIP[c.ip] >= h.perIP:
			if victim = h.idlest(c.ip, true); victim == nil {
				return false, nil
			}
		case h.max > 0 && len(h.open) >= h.max:
			if victim = h.idlest(netip.Addr{}, false); victim == nil {
				h.cond.Wait()
				continue
			}
		default:
			h.open[c] = struct{}{}
			h.byIP[c.ip]++
			return true, nil
		}
		victim.asked.Store(true)
		h.evicted.Inc()
		h.mu.Unlock()
		victim.Close() // gives its place back (release)
		h.mu.Lock()
	}
}

// idlest returns the open connection idle longest, of ip only if sameIP;
// nil if none is idle. h.mu is held.
func (h *httpConns) idlest(ip netip.Addr, sameIP bool) *httpConn {
	var best *httpConn
	var since int64
	for c := range h.open {
		t := c.idle.Load()
		if t == 0 || c.asked.Load() || (sameIP && c.ip != ip) {
			continue
		}
		if best == nil || t < since {
			best, since = c, t
		}
	}
	return best
}

// release gives c's place back.
func (h *httpConns) release(c *httpConn) {
	h.mu.Lock()
	if _, ok := h.open[c]; ok {
		delete(h.open, c)
		if h.byIP[c.ip]--; h.byIP[c.ip] <= 0 {
			delete(h.byIP, c.ip)
		}
	}
	h.cond.Broadcast()
	h.mu.Unlock()
}

// Close closes the listener and wakes an Accept waiting for room.
func (h *httpConns) Close() error {
	h.mu.Lock()
	h.closed = true
	h.cond.Broadcast()
	h.mu.Unlock()
	return h.Listener.Close()
}

// refuse closes c, whose IP is at --http-max-conns-per-ip with nothing
// idle; in plaintext it first answers 503 naming the flag. It is counted,
// and warned about at most every 10 s.
func (h *httpConns) refuse(c net.Conn, ip netip.Addr) {
	h.refused.Inc()
	now := time.Now().UnixNano()
	if last := h.lastWarn.Load(); now-last > int64(10*time.Second) && h.lastWarn.CompareAndSwap(last, now) {
		h.log.Warn("refused an HTTP connection: its client IP has --http-max-conns-per-ip open, none idle",
			"client_ip", ip.String(), "max_per_ip", h.perIP)
	}
	if !h.tls {
		msg := fmt.Sprintf("too many connections from %s: at most %d per client IP (--http-max-conns-per-ip)\n", ip, h.perIP)
		// A few bytes into a new socket's empty send buffer: the deadline
		// only guards against the impossible.
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)) //nolint:errcheck // the write fails instead
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite() //nolint:errcheck // closed below anyway
		}
	}
	c.Close()
}

// trackState is the HTTP server's ConnState hook: it keeps which
// connections are idle between requests, the ones that may be closed to
// make room.
func (h *httpConns) trackState(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	hc, ok := c.(*httpConn)
	if !ok {
		return
	}
	switch s {
	case http.StateIdle:
		hc.idle.Store(time.Now().UnixNano())
	case http.StateNew, http.StateActive:
		hc.idle.Store(0)
	}
}

// remoteIP is c's remote IP (unmapped); the zero Addr if it has none.
func remoteIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
