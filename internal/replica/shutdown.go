package replica

import (
	"context"
	"math"
	"sync"
	"time"
)

// shutdown stops the replica being ready (/readyz 503, gRPC health
// NOT_SERVING), leaves the cluster, drains its xDS streams and stops the
// servers (drain). The parts keep running meanwhile.
func (n *Node) shutdown() {
	n.stopping.Store(true)
	n.health.Shutdown() // NOT_SERVING now, and SERVING is never set again
	// Peers re-home this replica's nodes at once; its streams drain.
	if err := n.cluster.Leave(2 * time.Second); err != nil {
		n.log.Warn("leaving the cluster", "err", err)
	}
	n.drainStreams()
	n.drain()
}

// drainStreams closes the xDS streams the relay's interceptor has seen,
// local and relayed, spread over DrainPeriod (relay.Drain), and refuses
// new ones from its start, closing the connection of each shortly after
// (connTracker): their clients reconnect, through the load balancer that
// sees /readyz 503, to the other replicas, a few at a time rather than
// all at once. The HTTP server keeps serving meanwhile, so
// that health checks see 503. The pacer's jitter may go a little past
// the period: what is left then is closed at once.
func (n *Node) drainStreams() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainPeriod+n.cfg.DrainPeriod/10)
	defer cancel()
	n.warnDrainRate()
	began := time.Now()
	closed := n.relay.Drain(ctx, n.cfg.DrainPeriod)
	if ctx.Err() != nil {
		closed += n.relay.Drain(context.Background(), 0)
	}
	n.log.Info("drained the xDS streams", "closed", closed, "took", time.Since(began).Round(time.Millisecond).String())
}

// warnDrainRate warns when the drain is about to close this replica's
// clients' streams faster than its peers admit new ones (--stream-rate
// each, assuming theirs is this one's): the excess is refused and retries
// after a back-off, so the drain is a storm after all. It counts the
// streams whose clients connected here; peers are the ring's other
// members.
func (n *Node) warnDrainRate() {
	m := n.cluster.Membership()
	if n.cfg.StreamRate <= 0 || n.cfg.DrainPeriod <= 0 || m == nil {
		return
	}
	peers := 0
	for _, p := range m.Ring().Members() {
		if p.Name != n.cfg.Name {
			peers++
		}
	}
	edge := 0
	for _, s := range n.relay.Streams() {
		if s.RelayedBy == "" {
			edge++
		}
	}
	if peers == 0 || edge == 0 {
		return
	}
	if rate := float64(edge) / n.cfg.DrainPeriod.Seconds(); rate > n.cfg.StreamRate*float64(peers) {
		n.log.Warn("the drain closes streams faster than the other replicas admit them: raise --drain-period",
			"streams", edge, "drain_period", n.cfg.DrainPeriod.String(), "closes_per_second", math.Round(rate),
			"peers", peers, "stream_rate", n.cfg.StreamRate,
			"drain_period_needed", (time.Duration(float64(edge) / (n.cfg.StreamRate * float64(peers)) * float64(time.Second))).Round(time.Second).String())
	}
}

// drain stops the gRPC and HTTP servers, each given ShutdownTimeout to let
// what is in flight finish before it is cut. It returns once both are
// stopped.
func (n *Node) drain() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() {
			n.grpcSrv.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(n.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			n.log.Warn("gRPC drain timed out; closing the remaining streams", "timeout", n.cfg.ShutdownTimeout.String())
			n.grpcSrv.Stop()
			<-done
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	if err := n.httpSrv.Shutdown(ctx); err != nil {
		n.log.Warn("HTTP drain timed out; closing the remaining connections", "timeout", n.cfg.ShutdownTimeout.String())
		n.httpSrv.Close() // only the listener's error, already closed
	}
	n.shutdownProbe(ctx)
	wg.Wait()
}
