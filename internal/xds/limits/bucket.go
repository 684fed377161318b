package limits

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// bucket is a token bucket (rate.Limiter) whose reservations and
// cancellations read the clock under one lock, so that the times it is
// given only go forward. rate.Limiter's Reserve and Cancel read the clock
// before taking its own lock: under contention a caller can reach the
// lock with an earlier time than the last one recorded, the limiter moves
// its clock back to it, and the next caller is credited that interval a
// second time. In a burst of new streams, just when admission matters,
// that let several times the rate through (TestBucketUnderContention,
// 5,000 callers at once at 50 a second under -race: 279 and 346 got a
// token within a second, where the rate allows about 100; with the lock,
// about 100).
type bucket struct {
	mu sync.Mutex // serializes every call into l, with its clock reading
	l  *rate.Limiter
}

func newBucket(r float64, burst int) *bucket {
	return &bucket{l: rate.NewLimiter(rate.Limit(r), max(1, burst))}
}

// reserve takes a token now, or the next one to come: the reservation
// says how long to wait for it (Delay).
func (b *bucket) reserve() *rate.Reservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.l.ReserveN(time.Now(), 1)
}

// cancel gives r's token back, as far as later reservations allow.
func (b *bucket) cancel(r *rate.Reservation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.CancelAt(time.Now())
}
