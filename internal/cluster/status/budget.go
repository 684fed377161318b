package status

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// maxBurst caps the budget's burst so that it fits an int whatever
// MaxTxnsPerSecond is; a budget that large never holds a round back.
const maxBurst = 1 << 30

// budget is the write budget: a token bucket of etcd transactions,
// refilled at Config.MaxTxnsPerSecond up to a burst, full at first. Run's
// goroutine alone uses it.
type budget struct {
	lim *rate.Limiter
}

// newBudget returns a full budget for cfg (its zero fields filled). Spare
// budget accumulates up to a second's worth (or an Interval's, if longer):
// a round slower than Interval still spends the budget of the time it took.
func newBudget(cfg Config) budget {
	burst := max(1, math.Floor(cfg.MaxTxnsPerSecond*max(cfg.Interval, time.Second).Seconds()))
	return budget{lim: rate.NewLimiter(rate.Limit(cfg.MaxTxnsPerSecond), int(min(burst, maxBurst)))}
}

// available returns how many whole transactions the budget allows at now.
func (b budget) available(now time.Time) int {
	return int(b.lim.TokensAt(now))
}

// spend takes n transactions, at most what available(now) returned, from
// the budget as it was at now.
func (b budget) spend(now time.Time, n int) {
	b.lim.AllowN(now, n)
}
