package node

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
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

	pending chan pendingClose // closeSoon to run; full: the close is left to the server's stop

	userTimeout time.Duration // TCP_USER_TIMEOUT of each connection
	log         *slog.Logger
}

// pendingClose is a connection to close at a time.
type pendingClose struct {
	addr string
	at   time.Time
}

// newConnTracker tracks l's connections, and gives each a TCP_USER_TIMEOUT
// of userTimeout: data the replica sent that stays unacknowledged that
// long closes the connection. (grpc-go sets one from its keepalive
// timeout only on a *net.TCPConn, which a tracked connection is not.)
func newConnTracker(l net.Listener, userTimeout time.Duration, log *slog.Logger) *connTracker {
	return &connTracker{
		Listener: l, conns: map[string]*trackedConn{}, pending: make(chan pendingClose, 4096),
		userTimeout: userTimeout, log: log,
	}
}

// Accept accepts and tracks a connection.
func (l *connTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if err := setUserTimeout(tc, l.userTimeout); err != nil {
			// The connection is served anyway: the kernel's keepalive
			// still finds a dead peer once the connection is idle.
			l.log.Warn("could not set TCP_USER_TIMEOUT on an xDS connection", "remote", c.RemoteAddr().String(), "err", err)
		}
	}
	tc := &trackedConn{Conn: c, l: l, key: c.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[tc.key] = tc
	l.mu.Unlock()
	return tc, nil
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

// trackedConn removes itself from its tracker when closed.
type trackedConn struct {
	net.Conn
	l    *connTracker
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
