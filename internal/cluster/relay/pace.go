package relay

import (
	"context"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"
)

// pacer paces the closes of Rebalance, Shed and Drain: a token bucket
// (rate.Limiter) whose waits are jittered. A wait cut short by the jitter
// leaves the bucket in debt, which lengthens the next one, so over time
// the rate holds exactly. One goroutine at a time uses it: the running
// Rebalance or Shed (the handover in startRebalance orders the uses), or
// Drain its own.
type pacer struct{ lim *rate.Limiter }

// newPacer returns a pacer of perSecond tokens a second, holding up to
// burst, with tokens of them in the bucket to start with.
func newPacer(perSecond float64, burst, tokens int) *pacer {
	lim := rate.NewLimiter(rate.Limit(perSecond), burst) // full
	if tokens < burst {
		lim.ReserveN(time.Now(), burst-tokens)
	}
	return &pacer{lim: lim}
}

// wait takes a token, waiting for one if need be, or returns ctx's error
// (and takes none).
func (p *pacer) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := p.lim.Reserve()
	need := r.Delay()
	if need <= 0 {
		return nil
	}
	// Jitter: uniform in [need/2, 3*need/2).
	t := time.NewTimer(need/2 + rand.N(need+1))
	select {
	case <-ctx.Done():
		t.Stop()
		r.Cancel()
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
