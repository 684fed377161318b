package xdsstream

import (
	"sync"
	"testing"
	"time"
)

// TestBurstLog: of many lines at once, from many goroutines, one goes
// through; the next one, a logEvery later, reports how many were held
// back.
func TestBurstLog(t *testing.T) {
	var b burstLog
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 1000 {
		wg.Go(func() {
			if ok, _ := b.allow(now); ok {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 1 {
		t.Fatalf("%d of 1,000 lines at once let through, want 1", allowed)
	}
	if ok, _ := b.allow(now.Add(logEvery / 2)); ok {
		t.Fatal("a line half a logEvery later let through")
	}
	ok, held := b.allow(now.Add(logEvery))
	if !ok || held != 1000 {
		t.Fatalf("a logEvery later: allow = %v, %d held back; want true, 1000", ok, held)
	}
}
