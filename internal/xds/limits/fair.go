package limits

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errQueueFull and errWaitOver are fairBucket.take's refusals: its
// client's queue (or every client's) was full, or its wait ran out.
var (
	errQueueFull = errors.New("limits: admission queue full")
	errWaitOver  = errors.New("limits: admission wait over")
)

// fairBucket is a token bucket (rate tokens a second, up to burst) whose
// waiters are served fairly by client: each client (a key: an identity,
// a source address) waits in a queue of its own, and each token that
// comes goes to the next client in turn, so that one client opening
// streams by the thousand gets its share of the rate and no more while
// others want some, where one shared queue (first come, first served)
// would give it nearly all of them. A client alone gets every token, as
// with one queue. A client's queue holds at most perKey waiters (what
// the whole queue could hold with one: rate times the longest wait, plus
// burst), all queues together at most maxWaiting: a waiter beyond is
// refused at once, at no cost. A token taken for a stream that then
// turns out not to be allowed (refund) goes back to the bucket, at the
// rate at most: a flood of refused streams gets that many more through
// to be refused, not an unbounded number.
//
// Its methods may be called concurrently.
type fairBucket struct {
	rate, burst float64
	perKey      int
	maxWaiting  int

	mu     sync.Mutex
	tokens float64
	last   time.Time // when tokens was last brought up to date
	// refunds is how many more tokens refund may give back now: up to
	// burst, growing at rate.
	refunds float64
	queues  map[any]*fairQueue
	ring    []*fairQueue // the queues with waiters, in turn order
	next    int          // index in ring of the queue served next
	waiting int
	timer   *time.Timer // set for the next token while anyone waits
}

// fairQueue is one client's waiters, oldest first.
type fairQueue struct {
	key     any
	waiters []*fairWaiter
}

// fairWaiter is one stream waiting for a token: ready is closed once it
// is granted one.
type fairWaiter struct {
	ready   chan struct{}
	granted bool
}

// newFairBucket returns a bucket of rate tokens a second, burst at most
// (at least 1), whose waiters wait at most maxWait.
func newFairBucket(rate float64, burst int, maxWait time.Duration) *fairBucket {
	b := &fairBucket{rate: rate, burst: float64(max(1, burst)), queues: map[any]*fairQueue{}}
	b.tokens, b.refunds, b.last = b.burst, b.burst, time.Now()
	b.perKey = max(1, int(rate*maxWait.Seconds())+max(1, burst))
	b.maxWaiting = 16 * b.perKey
	return b
}

// refill brings tokens up to now. b.mu is held.
func (b *fairBucket) refill(now time.Time) {
	if now.After(b.last) {
		grown := now.Sub(b.last).Seconds() * b.rate
		b.tokens = min(b.burst, b.tokens+grown)
		b.refunds = min(b.burst, b.refunds+grown)
		b.last = now
	}
}

// take takes a token for client key, waiting for its turn up to maxWait
// or until ctx ends. It reports whether it waited.
func (b *fairBucket) take(ctx context.Context, key any, maxWait time.Duration) (waited bool, err error) {
	b.mu.Lock()
	b.refill(time.Now())
	if b.waiting == 0 && b.tokens >= 1 {
		b.tokens--
		b.mu.Unlock()
		return false, nil
	}
	q := b.queues[key]
	if b.waiting >= b.maxWaiting || (q != nil && len(q.waiters) >= b.perKey) {
		b.mu.Unlock()
		return true, errQueueFull
	}
	if q == nil {
		q = &fairQueue{key: key}
		b.queues[key] = q
		b.ring = append(b.ring, q)
	}
	w := &fairWaiter{ready: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	b.waiting++
	b.serve() // a token may be due already
	b.mu.Unlock()

	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return true, nil
	case <-t.C:
		err = errWaitOver
	case <-ctx.Done():
		err = ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.granted {
		return true, nil // granted meanwhile: it is the caller's
	}
	b.drop(q, w)
	return true, err
}

// refund gives a token back: the stream it admitted was refused by what
// came after (authorization), so it does not count against the rate. It
// reports false, giving nothing back, beyond the refunds' own rate.
func (b *fairBucket) refund() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(time.Now())
	if b.refunds < 1 {
		return false
	}
	b.refunds--
	b.tokens = min(b.burst, b.tokens+1)
	b.serve()
	return true
}

// serve grants the tokens there are to the waiters, one client after the
// other, and sets the timer for the next token while some still wait.
// b.mu is held.
func (b *fairBucket) serve() {
	b.refill(time.Now())
	for b.waiting > 0 && b.tokens >= 1 {
		if b.next >= len(b.ring) {
			b.next = 0
		}
		q := b.ring[b.next]
		w := q.waiters[0]
		w.granted = true
		close(w.ready)
		b.tokens--
		b.next++
		b.drop(q, w)
	}
	if b.waiting == 0 {
		return
	}
	d := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
	if b.timer == nil {
		b.timer = time.AfterFunc(d, b.wake)
		return
	}
	b.timer.Reset(d)
}

// wake is the timer's: a token is due.
func (b *fairBucket) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.serve()
}

// drop removes w from q, and q from the ring once empty. b.mu is held.
func (b *fairBucket) drop(q *fairQueue, w *fairWaiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			b.waiting--
			break
		}
	}
	if len(q.waiters) > 0 {
		return
	}
	delete(b.queues, q.key)
	for i, x := range b.ring {
		if x == q {
			b.ring = append(b.ring[:i], b.ring[i+1:]...)
			if i < b.next {
				b.next--
			}
			break
		}
	}
}
