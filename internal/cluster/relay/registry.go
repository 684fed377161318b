package relay

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// entry is a stream in the registry.
type entry struct {
	id        uint64
	ctx       context.Context // the stream's; cancel ends the stream
	cancel    context.CancelCauseFunc
	nodeID    string
	method    string
	relayedBy string // the replica that relayed the stream here, if any
	started   time.Time
	// servedBy is Local or the name of the home it is relayed to; a
	// failed relay turns it Local.
	servedBy atomic.Value // string
}

// StreamInfo describes a stream the interceptor has seen, for
// /debug/streams.
type StreamInfo struct {
	ID     uint64 `json:"id"`
	NodeID string `json:"node_id"`
	// Method is the gRPC method, such as
	// /envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources.
	Method string `json:"method"`
	// ServedBy is Local ("local"), or the name of the home replica the
	// stream is relayed to.
	ServedBy string `json:"served_by"`
	// RelayedBy is the replica that relayed the stream here, if one did.
	RelayedBy string    `json:"relayed_by,omitempty"`
	Started   time.Time `json:"started"`
}

func (e *entry) info() StreamInfo {
	return StreamInfo{ID: e.id, NodeID: e.nodeID, Method: e.method,
		ServedBy: e.servedBy.Load().(string), RelayedBy: e.relayedBy, Started: e.started}
}

// Streams returns the open streams the interceptor has seen, local and
// relayed, by id.
func (r *Relay) Streams() []StreamInfo {
	return xdsstream.Each(&r.streams, (*entry).info)
}

// movedError is why Rebalance closed a stream; the client gets it as
// UNAVAILABLE, which makes it reconnect (to its new home).
type movedError struct{ to string }

func (e movedError) Error() string { return "rebalance: home moved to " + e.to }

// GRPCStatus makes the error a gRPC status.
func (e movedError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.Error()) }

// moved says whether e is no longer served where home, the new ring,
// says, and where its home is now.
func (e *entry) moved(self string, home func(string) (string, bool)) (string, bool) {
	if e.nodeID == "" {
		return "", false // no home: a stream naming no node stays
	}
	name, isSelf := home(e.nodeID)
	if isSelf {
		name = self
	}
	served := e.servedBy.Load().(string)
	if served == Local {
		return name, !isSelf
	}
	return name, isSelf || name != served
}

// Rebalance closes, with UNAVAILABLE "rebalance: home moved to X", every
// open stream that is no longer served by its home according to home
// (the new ring): local streams whose home is another replica, and
// relayed streams whose home is now this replica or another one. It
// closes at most Config.Rate streams a second after a first Burst, with
// random jitter between closes, in random order, and returns how many it
// closed. Streams opened after it began are not considered: update
// Config.Home's ring first. It blocks until done or ctx ends. A later
// call supersedes a running one, which stops early; so do Drain and
// Close. Once Drain was called it does nothing and returns 0.
//
// home is called from Rebalance's goroutine only; it says which replica
// is nodeID's home and whether that is this replica.
func (r *Relay) Rebalance(ctx context.Context, home func(nodeID string) (name string, self bool)) int {
	if r.draining.Load() {
		return 0 // Drain closes every stream
	}
	ctx, end := r.startRebalance(ctx)
	defer end()
	// A membership change may bring back a home that was unreachable: a
	// connection to it waiting out its reconnection backoff would make
	// the streams closed here fall back to being served locally again,
	// off their home, until the next membership change.
	r.resetBackoff()
	type candidate struct {
		e  *entry
		to string
	}
	var moved []candidate
	for _, e := range xdsstream.Each(&r.streams, func(e *entry) *entry { return e }) {
		if to, ok := e.moved(r.cfg.Self, home); ok {
			moved = append(moved, candidate{e, to})
		}
	}
	// Random order: no node is always the first to move.
	rand.Shuffle(len(moved), func(i, j int) { moved[i], moved[j] = moved[j], moved[i] })
	closed := 0
	for _, c := range moved {
		if c.e.ctx.Err() != nil {
			continue // ended meanwhile: spend no token on it
		}
		if r.pacer.wait(ctx) != nil {
			break
		}
		if c.e.ctx.Err() != nil {
			continue
		}
		c.e.cancel(movedError{c.to})
		r.metrics.rebalanceCloses.Inc()
		closed++
		r.log.Debug("rebalance: closed a stream", "stream", c.e.id, "node", c.e.nodeID, "to", c.to)
	}
	if closed > 0 {
		r.log.Info("rebalance: closed streams whose home moved", "closed", closed, "moved", len(moved))
	}
	return closed
}

// resetBackoff drops from the pool every connection that waits out a
// reconnection backoff (TRANSIENT_FAILURE), so that the next stream to
// that home dials afresh, at once. (grpc-go's
// ClientConn.ResetConnectBackoff would reset it in place, but in v1.85 it
// ranges over the connection's subchannels without the lock its balancer
// writes them under: a data race.) A dropped connection still carrying
// streams is closed by release when the last one ends.
func (r *Relay) resetBackoff() {
	r.mu.Lock()
	var closeNow []*grpc.ClientConn
	for addr, pc := range r.conns {
		if pc.cc.GetState() != connectivity.TransientFailure {
			continue
		}
		delete(r.conns, addr)
		if pc.idle != nil {
			pc.idle.Stop()
			pc.idle = nil
		}
		if pc.refs == 0 {
			closeNow = append(closeNow, pc.cc)
		}
	}
	r.mu.Unlock()
	for _, cc := range closeNow {
		cc.Close() // only ErrClientConnClosing, impossible here
	}
}

// startRebalance stops the running Rebalance, waiting for it to end, and
// returns the context of a new one and the func that ends it.
func (r *Relay) startRebalance(parent context.Context) (context.Context, func()) {
	r.rbMu.Lock()
	defer r.rbMu.Unlock()
	if r.rbCancel != nil {
		r.rbCancel()
		<-r.rbDone // the ending Rebalance does not take rbMu
	}
	ctx, cancel := context.WithCancel(parent)
	if r.rbClosed {
		cancel()
	}
	done := make(chan struct{})
	r.rbCancel, r.rbDone = cancel, done
	return ctx, func() {
		cancel()
		close(done)
	}
}

// pacer paces Rebalance's closes: a token bucket of rate tokens a second
// holding up to burst, whose waits are jittered. A wait cut short by the
// jitter leaves the bucket in debt, which lengthens the next one, so over
// time the rate holds exactly. Only the running Rebalance uses it (the
// handover in startRebalance orders the uses).
type pacer struct {
	rate, burst float64
	tokens      float64
	last        time.Time // zero: the bucket is full
}

// wait takes a token, waiting for one if need be, or returns ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.refill()
	if p.tokens < 1 {
		need := time.Duration((1 - p.tokens) / p.rate * float64(time.Second))
		// Jitter: uniform in [need/2, 3*need/2).
		t := time.NewTimer(need/2 + rand.N(need+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		p.refill()
	}
	p.tokens--
	return nil
}

func (p *pacer) refill() {
	now := time.Now()
	if p.last.IsZero() {
		p.tokens = p.burst
	} else {
		p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	}
	p.last = now
}
