package awake

import (
	"testing"
	"time"
)

// fakeClock is a Clock whose time the test moves.
func fakeClock(t *testing.T) (*Clock, *time.Time) {
	t.Helper()
	c, err := New(Config{Tick: 100 * time.Millisecond, Threshold: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	return c, &now
}

func TestSince(t *testing.T) {
	c, now := fakeClock(t)
	t0 := *now
	if got := c.Since(t0.Add(-time.Second)); got != time.Second {
		t.Errorf("before the clock looked: Since = %s, want the wall clock's 1s", got)
	}
	c.observe(*now, 0)
	// On time: 10 ticks, each at most Threshold late.
	for range 10 {
		*now = now.Add(140 * time.Millisecond)
		c.observe(*now, 0)
	}
	if got, want := c.Since(t0), 1400*time.Millisecond; got != want {
		t.Errorf("ticks at most Threshold late: Since = %s, want %s (no starvation)", got, want)
	}
	// A freeze of 2s: the next look is 2s late.
	frozeAt := *now
	*now = now.Add(2100 * time.Millisecond)
	// Before the Clock's goroutine runs again, a detector already sees
	// the freeze as going on.
	if got, want := c.Since(frozeAt), 100*time.Millisecond; got != want {
		t.Errorf("during the freeze's end, before the clock looked: Since = %s, want %s", got, want)
	}
	if !c.Starved(0) {
		t.Error("Starved(0) = false with the clock's look 2s overdue")
	}
	c.observe(*now, 0)
	if got, want := c.Since(frozeAt), 100*time.Millisecond; got != want {
		t.Errorf("after the freeze: Since(its start) = %s, want %s (the tick before it fell due)", got, want)
	}
	if got, want := c.Since(t0), 1500*time.Millisecond; got != want {
		t.Errorf("Since(before the freeze) = %s, want %s", got, want)
	}
	// A time inside the freeze counts from its end.
	if got := c.Since(frozeAt.Add(time.Second)); got != 0 {
		t.Errorf("Since(inside the freeze) = %s, want 0", got)
	}
	if !c.Starved(time.Second) || c.Starved(0) {
		t.Errorf("Starved(1s) = %v, Starved(0) = %v just after a freeze; want true, false", c.Starved(time.Second), c.Starved(0))
	}
	for range 20 {
		*now = now.Add(100 * time.Millisecond)
		c.observe(*now, 0)
	}
	if c.Starved(time.Second) {
		t.Error("Starved(1s) = true 2s after the freeze ended")
	}
}

func TestSinceRemembersEpisodes(t *testing.T) {
	c, now := fakeClock(t)
	c.observe(*now, 0)
	t0 := *now
	for range episodes + 10 {
		*now = now.Add(time.Second) // each look 900ms late
		c.observe(*now, 0)
	}
	// Only the last 64 freezes of 900ms are known: 10 seconds of wall
	// time fall outside them, plus the 100ms ticks of the 64 known.
	want := 10*time.Second + episodes*100*time.Millisecond
	if got := c.Since(t0); got != want {
		t.Errorf("Since = %s, want %s", got, want)
	}
}

func TestNilClock(t *testing.T) {
	var c *Clock
	if got := c.Since(time.Now().Add(-time.Hour)); got < time.Hour {
		t.Errorf("nil Clock: Since = %s, want the wall clock", got)
	}
	if c.Starved(time.Hour) {
		t.Error("nil Clock: Starved = true")
	}
	fired := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(fired) })
	<-fired
}

func TestValidate(t *testing.T) {
	if _, err := New(Config{Tick: -1}); err == nil {
		t.Error("New accepted a negative Tick")
	}
}

// TestObserveQueued: an interval in which goroutines waited longer than
// Threshold for a CPU is a starvation of that length, ending at the
// look; starvations never overlap.
func TestObserveQueued(t *testing.T) {
	c, now := fakeClock(t)
	c.observe(*now, 0)
	t0 := *now
	*now = now.Add(100 * time.Millisecond)
	c.observe(*now, 40*time.Millisecond) // under Threshold: nothing
	if got := c.Since(t0); got != 100*time.Millisecond {
		t.Errorf("a queue delay under Threshold: Since = %s, want 100ms", got)
	}
	*now = now.Add(100 * time.Millisecond)
	c.observe(*now, 300*time.Millisecond) // reaches before the last look
	*now = now.Add(100 * time.Millisecond)
	c.observe(*now, 300*time.Millisecond) // overlaps the one before
	if got, want := c.Since(t0), 0*time.Millisecond; got != want {
		t.Errorf("after 300ms of wall time queued 300ms at each look: Since = %s, want %s", got, want)
	}
	if got := c.next; got != 2 {
		t.Errorf("%d starvations recorded, want 2", got)
	}
	*now = now.Add(100 * time.Millisecond)
	c.observe(*now, 0)
	if got, want := c.Since(t0), 100*time.Millisecond; got != want {
		t.Errorf("a look on time after them: Since = %s, want %s", got, want)
	}
}
