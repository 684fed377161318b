package limits

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFairBucketUnderContention: many streams asking for a token at once
// get no more than the burst plus the rate over the time the bucket is
// asked and the longest wait accepted.
func TestFairBucketUnderContention(t *testing.T) {
	const (
		rateLimit = 50
		burst     = 50
		callers   = 5000
		maxWait   = time.Second
	)
	b := newFairBucket(rateLimit, burst, maxWait)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range callers {
		wg.Go(func() {
			if _, err := b.take(context.Background(), i%7, maxWait); err == nil {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if n, limit := int(admitted.Load()), burst+int(rateLimit*(took+maxWait).Seconds())+1; n > limit || n < burst {
		t.Errorf("%d of %d callers got a token within %s in %s; want from %d (the burst) to %d", n, callers, maxWait, took, burst, limit)
	}
	if w, q, r := b.counts(); w != 0 || q != 0 || r != 0 {
		t.Errorf("after every caller: %d waiting, %d queues, ring of %d; want none", w, q, r)
	}
}

// TestFairBucketTurns: a client flooding the bucket with streams takes
// its turn like any other: clients asking while the flood waits are each
// granted within a few tokens' time, where a queue in order of arrival
// would have them wait behind the flood (and refused after the longest
// wait). The flood's queue is bounded: its excess is refused at once.
func TestFairBucketTurns(t *testing.T) {
	const rateLimit, burst, maxWait = 100, 10, time.Second
	b := newFairBucket(rateLimit, burst, maxWait)
	var wg sync.WaitGroup
	var floodRefusedAtOnce atomic.Int64
	for range 5 * b.perKey {
		wg.Go(func() {
			start := time.Now()
			if _, err := b.take(context.Background(), "flood", maxWait); err == errQueueFull && time.Since(start) < 100*time.Millisecond {
				floodRefusedAtOnce.Add(1)
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // the flood queued, the burst spent
	var late sync.WaitGroup
	waits := make([]time.Duration, 5)
	errs := make([]error, 5)
	for i := range waits {
		late.Go(func() {
			start := time.Now()
			_, errs[i] = b.take(context.Background(), fmt.Sprintf("honest-%d", i), maxWait)
			waits[i] = time.Since(start)
		})
	}
	late.Wait()
	for i := range waits {
		// Five clients and the flood share 100 tokens a second: each
		// turn comes within 6 tokens, 60 ms.
		if errs[i] != nil || waits[i] > 300*time.Millisecond {
			t.Errorf("honest client %d: %v after %s; want a token within 300ms", i, errs[i], waits[i])
		}
	}
	wg.Wait()
	if n := floodRefusedAtOnce.Load(); n < int64(3*b.perKey) {
		t.Errorf("%d of the flood's %d streams refused at once, want at least %d (its queue holds %d)", n, 5*b.perKey, 3*b.perKey, b.perKey)
	}
}

// TestFairBucketRefund: a token given back admits the next stream at
// once.
func TestFairBucketRefund(t *testing.T) {
	b := newFairBucket(0.1, 1, time.Second) // one token, the next in 10 s
	if _, err := b.take(context.Background(), "a", time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.take(context.Background(), "b", 5*time.Second)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if !b.refund() {
		t.Fatal("the first refund refused")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after a refund: %v, want a token", err)
		}
	case <-time.After(time.Second):
		t.Error("a refunded token did not admit the waiting stream")
	}
	// Refunds have their rate: the bucket's.
	if b.refund() {
		t.Error("a second refund within the refunds' rate given")
	}
	// Waits end by ctx too, and leave nothing queued.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.take(ctx, "c", 5*time.Second); err != context.DeadlineExceeded {
		t.Errorf("a wait cut by its context: %v, want the context's error", err)
	}
	if w, q, _ := b.counts(); w != 0 || q != 0 {
		t.Errorf("%d waiting, %d queues; want none", w, q)
	}
}

// counts is what b holds: waiters, queues, queues in the ring.
func (b *fairBucket) counts() (waiting, queues, ring int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting, len(b.queues), len(b.ring)
}
