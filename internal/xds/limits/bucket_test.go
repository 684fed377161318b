package limits

import (
	"sync"
	"testing"
	"time"
)

// TestBucketUnderContention: many streams asking for a token at once get
// no more than the burst plus the rate over the time the bucket is asked
// and the longest wait accepted, however their clock readings and the
// bucket's lock interleave.
func TestBucketUnderContention(t *testing.T) {
	const (
		rateLimit = 50
		burst     = 50
		callers   = 5000
		maxWait   = time.Second
	)
	b := newBucket(rateLimit, burst)
	var (
		mu       sync.Mutex
		admitted int
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			r := b.reserve()
			d := r.Delay()
			if d > maxWait {
				b.cancel(r)
				return
			}
			time.Sleep(d) // as admission waits for its turn
			mu.Lock()
			admitted++
			mu.Unlock()
		})
	}
	wg.Wait()
	took := time.Since(start)
	if limit := burst + int(rateLimit*(took+maxWait).Seconds()) + 1; admitted > limit || admitted < burst {
		t.Errorf("%d of %d callers got a token within %s in %s; want from %d (the burst) to %d", admitted, callers, maxWait, took, burst, limit)
	}
}
