package relay

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
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
