package status

import (
	"testing"
	"time"
)

// TestBudgetBucket: the budget starts full at its burst, a second's worth
// (or an Interval's, if longer), refills at MaxTxnsPerSecond, and never
// holds more than its burst.
func TestBudgetBucket(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name     string
		rate     float64
		interval time.Duration
		burst    int
	}{
		{"a second's worth", 20, 100 * time.Millisecond, 20},
		{"an interval's worth", 20, 3 * time.Second, 60},
		{"at least one", 0.5, time.Second, 1},
		{"capped", 1e300, time.Second, maxBurst},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBudget(Config{MaxTxnsPerSecond: c.rate, Interval: c.interval})
			if got := b.available(now); got != c.burst {
				t.Fatalf("a new budget allows %d, want its burst %d", got, c.burst)
			}
			b.spend(now, c.burst)
			if got := b.available(now); got != 0 {
				t.Errorf("after spending it all: %d, want 0", got)
			}
			if got := b.available(now.Add(time.Hour)); got != c.burst {
				t.Errorf("an hour later: %d, want the burst %d", got, c.burst)
			}
		})
	}
	b := newBudget(Config{MaxTxnsPerSecond: 20, Interval: time.Second})
	b.spend(now, 20)
	if got := b.available(now.Add(100 * time.Millisecond)); got != 2 {
		t.Errorf("100ms after spending it all at 20/s: %d, want 2", got)
	}
	b.spend(now.Add(100*time.Millisecond), 1)
	if got := b.available(now.Add(150 * time.Millisecond)); got != 2 {
		t.Errorf("one spent, 50ms more at 20/s: %d, want 2", got)
	}
}
