package awake

import (
	"sync"
	"time"
)

// Timer calls a func once the process has been awake for a duration
// (Clock.AfterFunc). Its methods may be called concurrently.
type Timer struct {
	c     *Clock
	d     time.Duration
	f     func()
	start time.Time

	mu    sync.Mutex // guards t, ended
	t     *time.Timer
	ended bool // f was called, or Stop stopped it
}

// AfterFunc calls f in its own goroutine once the process has been awake
// for d (Since) from now: when the wall-clock timer fires early because
// the process was starved meanwhile, it waits out the rest. On a nil
// Clock it is time.AfterFunc's behaviour.
func (c *Clock) AfterFunc(d time.Duration, f func()) *Timer {
	tm := &Timer{c: c, d: d, f: f, start: time.Now()}
	if c != nil {
		tm.start = c.now()
	}
	tm.mu.Lock()
	tm.t = time.AfterFunc(d, tm.fire)
	tm.mu.Unlock()
	return tm
}

func (tm *Timer) fire() {
	tm.mu.Lock()
	if tm.ended {
		tm.mu.Unlock()
		return
	}
	if left := tm.d - tm.c.Since(tm.start); left > 0 {
		tm.t.Reset(left)
		tm.mu.Unlock()
		return
	}
	tm.ended = true
	tm.mu.Unlock()
	tm.f()
}

// Stop prevents the call if it has not happened yet; it reports whether
// it did (false: f was called or is being called, or Stop was called
// before). It does not wait for f.
func (tm *Timer) Stop() bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.ended {
		return false
	}
	tm.ended = true
	tm.t.Stop()
	return true
}
