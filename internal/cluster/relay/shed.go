package relay

import (
	"context"
	"math/rand/v2"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// shedMsg is the message of the UNAVAILABLE status that Shed closes
// streams with.
const shedMsg = "relay: this replica holds more than its share of the cluster's streams; reconnect to another replica"

// shedError is why Shed closed a stream; the client gets it as
// UNAVAILABLE, and reconnects through the load balancer.
type shedError struct{}

func (shedError) Error() string { return shedMsg }

// GRPCStatus makes the error a gRPC status.
func (shedError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, shedMsg) }

// Shed closes up to n of the streams whose clients connected to this
// replica (not those another replica relayed here), in random order, with
// UNAVAILABLE "relay: this replica holds more than its share ...", paced
// as Rebalance is (Config.Rate a second after a first Config.Burst,
// jittered), and calls Config.Drained for each so that its connection is
// closed and the client's retry goes through the load balancer rather
// than coming back here. It is how a replica that took on more than its
// share of the clients (a peer was down, the load balancer was uneven)
// gives them back once its peers are up. It returns how many it closed.
//
// Like Rebalance it stops early when ctx ends or a later Rebalance, Shed,
// Drain or Close begins, and does nothing once Drain was called.
func (r *Relay) Shed(ctx context.Context, n int) int {
	if r.draining.Load() || n <= 0 {
		return 0
	}
	ctx, end := r.startRebalance(ctx)
	defer end()
	var edge []*entry
	for _, e := range xdsstream.Each(&r.streams, func(e *entry) *entry { return e }) {
		if e.relayedBy == "" {
			edge = append(edge, e)
		}
	}
	rand.Shuffle(len(edge), func(i, j int) { edge[i], edge[j] = edge[j], edge[i] })
	closed := 0
	for _, e := range edge {
		if closed == n {
			break
		}
		if e.ctx.Err() != nil {
			continue // ended meanwhile (its connection shed with another)
		}
		if r.pacer.wait(ctx) != nil {
			break
		}
		if e.ctx.Err() != nil {
			continue
		}
		e.cancel(shedError{})
		r.drained(e.ctx)
		r.metrics.shedCloses.Inc()
		closed++
		r.log.Debug("shed: closed a stream", "stream", e.id, "node", e.nodeID)
	}
	if closed > 0 {
		r.log.Info("shed: closed streams above this replica's share", "closed", closed, "asked", n)
	}
	return closed
}
