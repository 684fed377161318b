package awake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Clock.
type Config struct {
	// Tick is how often the Clock looks at the time while it runs: the
	// finest starvation it can see, and its whole cost (one wake per
	// Tick). Zero: 200ms.
	Tick time.Duration
	// Threshold is how late a tick must be to count as starvation: a
	// scheduler that runs the Clock's goroutine this much later than due
	// gave the process no time to run its other goroutines either. Zero:
	// 100ms.
	Threshold time.Duration
	// Registerer registers the Clock's metrics; nil: none.
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Tick:      200 * time.Millisecond, // five wakes a second
		Threshold: 100 * time.Millisecond, // well above a busy scheduler's delay, far below any detector's bound
	}
}

// Validate checks c, with zero fields taken as their defaults.
func (c Config) Validate() error {
	if c.Tick < 0 || c.Threshold < 0 {
		return fmt.Errorf("awake: Tick %s and Threshold %s must not be negative", c.Tick, c.Threshold)
	}
	return nil
}

// episodes is how many starvations a Clock remembers: Since subtracts
// those that overlap the time asked about, and a detector's bound spans
// a few seconds.
const episodes = 64

// Clock measures the time this process was awake: wall time minus the
// starvations it noticed. Its methods may be called concurrently, and
// on a nil *Clock, which is the wall clock.
type Clock struct {
	tick, threshold time.Duration
	now             func() time.Time // time.Now; tests replace it
	metrics         *metrics

	mu   sync.Mutex // guards last, eps, next
	last time.Time  // when Run last looked; zero before it first did
	eps  [episodes]episode
	next int // index in eps of the next episode to record
}

// latest returns the last episode recorded; zero when none was. c.mu is
// held.
func (c *Clock) latest() episode {
	if c.next == 0 {
		return episode{}
	}
	return c.eps[(c.next-1)%episodes]
}

// episode is one starvation: the process was not run from from to to.
type episode struct{ from, to time.Time }

// New returns a Clock; call Run to make it notice starvation. Until Run
// has looked once, Since is the wall clock.
func New(cfg Config) (*Clock, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	if cfg.Tick == 0 {
		cfg.Tick = d.Tick
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = d.Threshold
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Clock{tick: cfg.Tick, threshold: cfg.Threshold, now: time.Now, metrics: m}, nil
}

// Run looks at the time every Tick until ctx ends, recording as a
// starvation each tick later than Threshold, and each interval in which
// the goroutines that ran had waited longer than Threshold for a CPU
// (runq.go). Call it once.
func (c *Clock) Run(ctx context.Context) {
	t := time.NewTicker(c.tick)
	defer t.Stop()
	q := newRunQueue()
	q.delay() // the baseline
	c.observe(c.now(), 0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// The tick's own time is when the runtime sent it, which a
			// starved process reaches late as well: what counts is when
			// this goroutine got to run.
			c.observe(c.now(), q.delay())
		}
	}
}

// observe records now as the time the Clock last looked, and as a
// starvation the gap since the previous look when it is later than due,
// or else the last queued delay before now when it is over Threshold:
// a goroutine woken in that time ran that much later. Starvations never
// overlap.
func (c *Clock) observe(now time.Time, queued time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() {
		c.last = now
		return
	}
	from, ok := c.overdue(now)
	if !ok && queued > c.threshold {
		from, ok = now.Add(-queued), true
	}
	if end := c.latest().to; ok && from.Before(end) {
		from = end
	}
	if ok && from.Before(now) {
		c.eps[c.next%episodes] = episode{from: from, to: now}
		c.next++
		c.metrics.starvations.Inc()
		c.metrics.starved.Add(now.Sub(from).Seconds())
	}
	c.last = now
}

// overdue reports whether the Clock's look due after last is late by
// more than Threshold at now, and since when the process has been
// starved if so. c.mu is held.
func (c *Clock) overdue(now time.Time) (time.Time, bool) {
	if c.last.IsZero() {
		return time.Time{}, false
	}
	due := c.last.Add(c.tick)
	if now.Sub(due) <= c.threshold {
		return time.Time{}, false
	}
	return due, true
}

// Since returns how long the process has been awake since t: the wall
// time since t less the starvations noticed in it, including one going
// on (the Clock's look overdue), which a detector woken by the end of a
// freeze may see before the Clock's goroutine has run. Starvations older
// than the last 64 are not subtracted. On a nil Clock it is time.Since.
func (c *Clock) Since(t time.Time) time.Duration {
	if c == nil {
		return time.Since(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	elapsed := now.Sub(t)
	if elapsed <= 0 {
		return 0
	}
	var starved time.Duration
	for _, e := range c.eps {
		starved += overlap(e, t, now)
	}
	if from, ok := c.overdue(now); ok {
		starved += overlap(episode{from: from, to: now}, t, now)
	}
	return max(0, elapsed-starved)
}

// overlap returns how much of e lies between from and to.
func overlap(e episode, from, to time.Time) time.Duration {
	if e.from.Before(from) {
		e.from = from
	}
	if e.to.After(to) {
		e.to = to
	}
	return max(0, e.to.Sub(e.from))
}

// Starved reports whether the process is starved now (the Clock's look
// overdue) or a starvation ended within the last d. A nil Clock never
// is.
func (c *Clock) Starved(d time.Duration) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.overdue(now); ok {
		return true
	}
	if c.next == 0 {
		return false
	}
	return now.Sub(c.latest().to) < d
}

// Now returns the current time, as Since reads it; on a nil Clock,
// time.Now.
func (c *Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c.now()
}
