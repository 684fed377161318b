package replica

import (
	"context"
	"math"
	"time"
)

// shedEvery is how often a replica with a share cap (--max-streams-share)
// checks whether it holds more streams than the cap; shedSettle is how
// long the ring must have been still before it sheds any, so that the
// rebalance after a membership change is done and the estimate of the
// fair share reflects the new ring.
const (
	shedEvery  = time.Second
	shedSettle = 10 * time.Second
)

// shedLoop gives back streams above the share cap until ctx ends: when
// the streams admitted here exceed --max-streams-share times the fair
// share (never below shareFloor), it closes the excess among its own
// clients' streams, paced as a rebalance and with their connections
// (relay.Shed), so that they reconnect through the load balancer; this
// replica refuses them meanwhile (over the cap). It is what brings a
// cluster back to even after a replica was down: while it was, its peers
// took its clients at a fair share of half, and nothing else moves a
// connection back. It does nothing while stopping or in the shedSettle
// after a membership change.
func (n *Node) shedLoop(ctx context.Context) {
	settle := shedSettle
	if n.cfg.shedSettle > 0 {
		settle = n.cfg.shedSettle
	}
	t := time.NewTicker(shedEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.stopping.Load() || n.rebalancing.Load() || time.Since(time.Unix(0, n.ringChanged.Load())) < settle {
			continue
		}
		fair, ok := n.fairShare()
		if !ok {
			continue
		}
		limit := int(math.Floor(max(float64(n.shareFloor()), n.cfg.MaxStreamsShare*fair)))
		if excess := n.limits.Open() - limit; excess > 0 {
			n.log.Info("holding more streams than the share cap; shedding the excess",
				"open", n.limits.Open(), "cap", limit, "fair_share", math.Round(fair), "shedding", excess)
			n.relay.Shed(ctx, excess)
		}
	}
}
