package replica

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// drainConnDelay is how long after the drain closed a stream (or refused
// one) its connection is closed: time for the stream's status to reach
// the client first, and less than a client's first retry backoff (Envoy's
// is 500ms, jittered), so that the retry finds the connection gone and
// goes through the load balancer.
const drainConnDelay = 200 * time.Millisecond

// connTracker is the xDS listener, keeping its open connections by remote
// address, so that a drain can close the connection of each stream it
// closes: with an L4 load balancer a client's retry on the same
// connection would come back here, be refused, and come back again until
// the gRPC server stops, and then every client left would reconnect at
// once. Its methods may be called concurrently.
type connTracker struct {
	net.Listener
	mu    sync.Mutex // guards conns
	conns map[string]*trackedConn

	// max bounds the connections open (--max-connections); 0: no bound.
	// A connection beyond it is closed as soon as accepted and counted in
	// refused.
	max      int
	refused  prometheus.Counter
	lastWarn atomic.Int64 // unix nanoseconds of the last warning of a refusal
	// unfinished counts connections closed before gRPC took them, their
	// TLS and HTTP/2 handshakes not through (--handshake-timeout).
	unfinished     prometheus.Counter
	lastUnfinished atomic.Int64 // unix nanoseconds of the last log of one

	pending chan pendingClose // closeSoon to run; full: the close is left to the server's stop

	ka  connKeepalive
	log *slog.Logger
}

// connKeepalive is how the kernel finds a dead client on an xDS
// connection: after Idle with nothing received it sends a TCP keepalive
// probe, and closes the connection when none is answered within
// Timeout; data the replica sent that stays unacknowledged for both
// together closes it too (TCP_USER_TIMEOUT).
//
// Each connection's Idle is jittered, up to a tenth either way, and a
// dead peer gets three probes, not one: connections that went quiet
// together (after a push, all of them) would otherwise be probed in the
// same instant, and a burst of thousands of probes overflows a queue on
// the way (a loopback's backlog, a qdisc's 1,000 packets); one lost
// probe would close a live client's connection, and the reconnects make
// the next burst.
type connKeepalive struct {
	Idle, Timeout time.Duration
}

// keepaliveProbes is how many probes a quiet connection is sent before
// it is closed.
const keepaliveProbes = 3

// config returns the keepalive of one connection, its idle time drawn
// by jitter, a number in [0, 1), and its TCP_USER_TIMEOUT.
func (k connKeepalive) config(jitter float64) (net.KeepAliveConfig, time.Duration) {
	idle := time.Duration(float64(k.Idle) * (0.9 + 0.2*jitter)).Truncate(time.Second)
	idle = max(idle, time.Second)
	interval := max((k.Timeout / keepaliveProbes).Truncate(time.Second), time.Second)
	return net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: keepaliveProbes}, idle + k.Timeout
}

// pendingClose is a connection to close at a time.
type pendingClose struct {
	addr string
	at   time.Time
}

// newConnTracker tracks l's connections, and gives each the keepalive
// ka and a TCP_USER_TIMEOUT. (grpc-go sets one from its keepalive
// timeout only on a *net.TCPConn, which a tracked connection is not.)
// At most max connections are open at once (0: no bound).
func newConnTracker(l net.Listener, ka connKeepalive, max int, log *slog.Logger) *connTracker {
	return &connTracker{
		Listener: l, conns: map[string]*trackedConn{}, pending: make(chan pendingClose, 4096),
		ka: ka, log: log, max: max,
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_node_xds_connections_refused_total",
			Help: "Connections to --xds-addr closed as soon as accepted: --max-connections were open."}),
		unfinished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_node_xds_handshakes_unfinished_total",
			Help: "Connections to --xds-addr closed before their TLS and HTTP/2 handshakes were through: past --handshake-timeout, or a failed handshake."}),
	}
}

// register registers the tracker's metrics on reg.
func (l *connTracker) register(reg prometheus.Registerer) error {
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "legation_node_xds_connections",
		Help: "Connections open on --xds-addr, clients' and relaying replicas' (bounded by --max-connections).",
	}, func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return float64(len(l.conns))
	})
	for _, c := range []prometheus.Collector{open, l.refused, l.unfinished} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("node: register metrics: %w", err)
		}
	}
	return nil
}

// Accept accepts and tracks a connection. One beyond max is closed at
// once, and Accept waits for the next: an error would stop the gRPC
// server.
func (l *connTracker) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.full() {
			return l.track(c), nil
		}
		c.Close() // the client sees it closed; nothing else to do
		l.refused.Inc()
		if now := time.Now().UnixNano(); now-l.lastWarn.Load() > int64(time.Minute) {
			l.lastWarn.Store(now)
			l.log.Warn("refusing xDS connections: --max-connections are open (logged at most once a minute; legation_node_xds_connections_refused_total counts them)",
				"max_connections", l.max, "remote", c.RemoteAddr().String())
		}
	}
}

// full reports whether max connections are open. Accept alone adds
// connections, so the answer holds until it adds one.
func (l *connTracker) full() bool {
	if l.max <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns) >= l.max
}

// track sets up and tracks an accepted connection.
func (l *connTracker) track(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		ka, userTimeout := l.ka.config(rand.Float64())
		if err := tc.SetKeepAliveConfig(ka); err != nil {
			l.log.Warn("could not set TCP keepalive on an xDS connection", "remote", c.RemoteAddr().String(), "err", err)
		}
		if err := setUserTimeout(tc, userTimeout); err != nil {
			// The connection is served anyway: the kernel's keepalive
			// still finds a dead peer once the connection is idle.
			l.log.Warn("could not set TCP_USER_TIMEOUT on an xDS connection", "remote", c.RemoteAddr().String(), "err", err)
		}
	}
	tc := &trackedConn{Conn: c, l: l, key: c.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[tc.key] = tc
	l.mu.Unlock()
	if rr := newReadyConn(tc); rr != nil {
		return rr
	}
	return tc
}

// closeSoon closes, drainConnDelay from now, the connection of the stream
// of ctx. It does not block: it is relay.Config.Drained.
func (l *connTracker) closeSoon(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	select {
	case l.pending <- pendingClose{p.Addr.String(), time.Now().Add(drainConnDelay)}:
	default: // the gRPC server's stop closes it
	}
}

// run closes the connections closeSoon was given, when due, until ctx
// ends.
func (l *connTracker) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		var pc pendingClose
		select {
		case <-ctx.Done():
			return
		case pc = <-l.pending:
		}
		// Due in order: each waits drainConnDelay from its enqueueing.
		t.Reset(time.Until(pc.at))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		c := l.conns[pc.addr]
		l.mu.Unlock()
		if c != nil {
			c.Close() // the client sees it go; an error leaves nothing to do
		}
	}
}

// TagConn implements stats.Handler: gRPC tags a connection once its TLS
// and HTTP/2 handshakes are through, which marks it served.
func (l *connTracker) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.RemoteAddr == nil {
		return ctx
	}
	l.mu.Lock()
	c := l.conns[info.RemoteAddr.String()]
	l.mu.Unlock()
	if c != nil {
		c.served.Store(true)
	}
	return ctx
}

// HandleConn, TagRPC and HandleRPC implement stats.Handler: nothing to do.
func (l *connTracker) HandleConn(context.Context, stats.ConnStats) {}

func (l *connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (l *connTracker) HandleRPC(context.Context, stats.RPCStats) {}

// closedUnserved counts a connection closed before its handshakes were
// through, and logs it at most once a minute.
func (l *connTracker) closedUnserved(c *trackedConn) {
	l.unfinished.Inc()
	if now := time.Now().UnixNano(); now-l.lastUnfinished.Load() > int64(time.Minute) {
		l.lastUnfinished.Store(now)
		l.log.Info("an xDS connection closed before its TLS and HTTP/2 handshakes were through: past --handshake-timeout, or a failed handshake (logged at most once a minute; legation_node_xds_handshakes_unfinished_total counts them)",
			"remote", c.key)
	}
}

// trackedConn removes itself from its tracker when closed.
type trackedConn struct {
	net.Conn
	l      *connTracker
	key    string
	once   sync.Once
	served atomic.Bool // gRPC took it: its handshakes were through
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		if !c.served.Load() {
			c.l.closedUnserved(c)
		}
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
