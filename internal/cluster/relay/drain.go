package relay

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// drainingMsg is the message of the UNAVAILABLE status that Drain closes
// streams with, and that streams arriving during a drain are refused with.
const drainingMsg = "relay: this replica is draining (shutting down); reconnect to another replica"

// drainingError is why Drain closed a stream; the client gets it as
// UNAVAILABLE, which makes it reconnect, through the load balancer, to
// another replica.
type drainingError struct{}

func (drainingError) Error() string { return drainingMsg }

// GRPCStatus makes the error a gRPC status.
func (drainingError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, drainingMsg) }

// errDraining refuses a stream that arrives during a drain.
var errDraining = drainingError{}.GRPCStatus().Err()

// Drain closes every open stream the interceptor has seen, local and
// relayed, with UNAVAILABLE "relay: this replica is draining ...", spread
// evenly over period in random order: the first at once, the next ones
// at period/n apart on average, each gap jittered (the pacer Rebalance
// uses, at n/period streams a second). Period zero
// closes them all at once. It returns how many it closed.
//
// Config.Drained is called for each stream closed or refused.
//
// From the call on, the interceptor refuses every new xDS stream with the
// same status (the load balancer, seeing /readyz 503, sends the client's
// retry elsewhere) and Rebalance does nothing: a draining replica has
// left the ring, and every stream it has is closed anyway. A running
// Rebalance is stopped first. Drain blocks until done, ctx ends or Close
// is called; it is meant to be called once, when the replica shuts down,
// and draining is never undone.
func (r *Relay) Drain(ctx context.Context, period time.Duration) int {
	r.draining.Store(true)
	ctx, end := r.startRebalance(ctx)
	defer end()
	// Every stream registered from now on sees draining set and ends by
	// itself (intercept checks it after registering), so this list and
	// those streams are all of them.
	open := xdsstream.Each(&r.streams, func(e *entry) *entry { return e })
	rand.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
	if len(open) == 0 {
		return 0
	}
	// One token to close the first stream at once; room for a second so
	// that a jittered wait that ran long is made up by the next one
	// (with room for one only, the surplus would be lost and the drain
	// run past the period).
	p := newPacer(float64(len(open))/period.Seconds(), 2, 1)
	closed := 0
	for _, e := range open {
		if e.ctx.Err() != nil {
			continue // ended meanwhile
		}
		if period > 0 && p.wait(ctx) != nil {
			break
		}
		if e.ctx.Err() != nil {
			continue
		}
		e.cancel(drainingError{})
		if e.relayedBy == "" {
			// A relaying replica's connection carries others' streams.
			r.drained(e.ctx)
		}
		r.metrics.drainCloses.Inc()
		closed++
		r.log.Debug("drain: closed a stream", "stream", e.id, "node", e.nodeID)
	}
	r.log.Info("drain: closed the open streams", "closed", closed, "open", len(open), "period", period.String())
	return closed
}

// drained calls Config.Drained, if set.
func (r *Relay) drained(ctx context.Context) {
	if r.cfg.Drained != nil {
		r.cfg.Drained(ctx)
	}
}
