// Package quietgc runs the garbage collector between pushes, so that a
// push is not slowed by one.
//
// Go collects when the heap has grown to its goal, and a replica's heap
// grows fastest while it pushes: so a collection nearly always starts in
// a push. At 10,000 streams a collection is some 400 ms of CPU, mostly
// scanning the goroutine stacks of the streams; the goroutines pushing
// pay much of it as mark assists, and the whole fan-out is late by
// 100-200 ms. The Collector watches the view: after a snapshot with
// changes is published, it waits until no stream has been busy for
// Quiet, and then, if the heap has grown past Share of the way from what
// the last collection left live to the next collection's goal, collects
// (runtime.GC). The next pushes then start with room to spare. It only
// moves collections earlier, into quiet moments: with no changes it
// never wakes, and a replica that is never quiet is left to the runtime.
//
// With Park, it also holds off the runtime's forced collection: Go
// collects every 2 minutes however little was allocated, and at 10,000
// streams each such collection is some 200 ms of CPU (mostly scanning the
// streams' goroutine stacks) that finds nothing to free, the largest part
// of what an idle replica costs. Once the replica is quiet, the Collector
// turns GOGC off and sets a memory limit at what the heap's goal would
// take, so the runtime collects only if the heap does grow to its goal, as
// it would have anyway; the first collection while parked, or the next
// change, restores GOGC and the limit as they were.
// The price is more collections while changes keep coming: one each
// half of the heap's growth room instead of all of it, up to twice as
// many. Half, because the runtime starts its own collection well before
// the goal (at three quarters, a push that crossed the mark often reached
// the runtime's trigger too); the half left is room for a burst of
// pushes.
package quietgc

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/state/view"
)

// Busy counts the streams handling something (a request, a newer
// snapshot, a lease extension's heartbeats) right now, and keeps when
// the last one was done: a push is over when the streams have sent and
// the clients' ACKs have been taken, each a moment's work, so sampling
// the count alone would miss them. The
// zero value is ready; a nil *Busy counts nothing. Its methods may be
// called concurrently.
type Busy struct {
	n    atomic.Int64
	last atomic.Int64 // unix nanoseconds of the last Leave
}

// Enter records that a stream started handling something; it returns
// whether it counted (false on a nil Busy), for Leave.
func (b *Busy) Enter() bool {
	if b == nil {
		return false
	}
	b.n.Add(1)
	return true
}

// Leave records that a stream that entered is done.
func (b *Busy) Leave() {
	b.last.Store(time.Now().UnixNano())
	b.n.Add(-1)
}

// Count is the number of streams busy now (0 on a nil Busy).
func (b *Busy) Count() int64 {
	if b == nil {
		return 0
	}
	return b.n.Load()
}

// Last is when a stream was last done (zero: never, or a nil Busy).
func (b *Busy) Last() time.Time {
	if b == nil || b.last.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, b.last.Load())
}

// idleFor reports whether no stream is busy and none has been for d.
func (b *Busy) idleFor(d time.Duration, now time.Time) bool {
	if b == nil {
		return true
	}
	return b.n.Load() == 0 && now.UnixNano()-b.last.Load() >= int64(d)
}

// Snapshots is the view a Collector follows (view.View).
type Snapshots interface {
	Ready() <-chan struct{}
	Snapshot() *view.Snapshot
}

// Config configures a Collector.
type Config struct {
	// Busy is what the streams count themselves in.
	Busy *Busy
	// Quiet is how long no stream must have been busy (default 100 ms).
	Quiet time.Duration
	// Share is how far the heap must have grown from the live heap
	// toward the goal for a collection to be worth it (default 0.5).
	Share float64
	// GiveUp bounds the wait for a quiet moment after a change (default
	// 10 s): a replica busy that long is left to the runtime.
	GiveUp time.Duration
	// Collections, if set, counts the collections started.
	Collections prometheus.Counter
	// Park holds off the runtime's forced collection while the replica
	// is quiet (see the package comment). It changes the process's GOGC
	// and memory limit while parked: one Collector in a process may.
	Park bool
	// Parked, if set, is 1 while parked and 0 otherwise.
	Parked prometheus.Gauge
}

// Collector runs collections between pushes. Make it with New.
type Collector struct {
	cfg  Config
	heap func() Heap // runtime/metrics; replaced in tests
	gc   func()

	// Parking (Run's goroutine only, but for the cleanups).
	parked    bool
	parks     atomic.Uint64 // parkings so far: the current one's number
	collected atomic.Uint64 // the parking during which a collection ran
	woken     chan struct{} // a parking's sentinel was collected
	percent   int           // GOGC and the memory limit to restore
	limit     int64
}

// Heap is the part of the runtime's heap statistics a Collector reads.
type Heap struct {
	// Live is what the last collection left live, Goal the heap size at
	// which the runtime collects next, and InUse what the heap's objects
	// take now (live and dead, not yet collected).
	Live, Goal, InUse uint64
	// Total is all the memory the runtime holds and has not returned to
	// the system: what a memory limit is checked against.
	Total uint64
}

// New returns a Collector.
func New(cfg Config) *Collector {
	if cfg.Quiet <= 0 {
		cfg.Quiet = 100 * time.Millisecond
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = 0.5
	}
	if cfg.GiveUp <= 0 {
		cfg.GiveUp = 10 * time.Second
	}
	return &Collector{cfg: cfg, heap: readHeap, gc: runtime.GC, woken: make(chan struct{}, 1)}
}

// Due reports whether h has grown past the share of the way to its goal.
func (c *Collector) Due(h Heap) bool {
	if h.Goal <= h.Live {
		return false
	}
	return float64(h.InUse) >= float64(h.Live)+c.cfg.Share*float64(h.Goal-h.Live)
}

// parkRetry is how long a Collector that found no quiet moment to park
// in waits before it looks again (a change makes it look at once).
const parkRetry = time.Minute

// Run follows src until ctx ends.
func (c *Collector) Run(ctx context.Context, src Snapshots) {
	select {
	case <-src.Ready():
	case <-ctx.Done():
		return
	}
	defer c.unpark()
	snap := src.Snapshot()
	var retry <-chan time.Time // set after a failed wait for quiet to park
	for {
		if c.cfg.Park && !c.parked && retry == nil {
			if c.waitQuiet(ctx) {
				c.park()
			} else if ctx.Err() == nil {
				retry = time.After(parkRetry)
			}
		}
		select {
		case <-snap.Done():
		case <-c.woken:
			if c.parked && c.collected.Load() == c.parks.Load() {
				// The heap grew to its goal while parked: back to the
				// runtime until the next quiet moment.
				c.unpark()
			}
			continue
		case <-retry:
			retry = nil
			continue
		case <-ctx.Done():
			return
		}
		changed := false
		for x := snap.Next(); x != nil; x = x.Next() {
			snap = x
			changed = changed || len(x.Changes) > 0
		}
		if !changed {
			continue // a revision no stream can see: no push
		}
		c.unpark()
		retry = nil
		if c.waitQuiet(ctx) {
			c.CollectIfDue()
		}
	}
}

// park turns GOGC off, with a memory limit at what the heap would take at
// its goal (or the limit already set, if lower), and arms a sentinel
// whose cleanup runs after the next collection. With GOGC already off
// there is no forced collection to hold off, and it leaves things be.
func (c *Collector) park() {
	h := c.heap()
	limit := int64(h.Total + h.Goal - min(h.InUse, h.Goal))
	prevLimit := debug.SetMemoryLimit(-1) // reads it
	if prevLimit < limit {
		limit = prevLimit
	}
	debug.SetMemoryLimit(limit)
	prev := debug.SetGCPercent(-1)
	if prev < 0 {
		debug.SetMemoryLimit(prevLimit)
		return
	}
	c.percent, c.limit, c.parked = prev, prevLimit, true
	gen, collected, woken := c.parks.Add(1), &c.collected, c.woken
	runtime.AddCleanup(new(sentinel), func(uint64) {
		collected.Store(gen)
		select {
		case woken <- struct{}{}:
		default:
		}
	}, gen)
	if c.cfg.Parked != nil {
		c.cfg.Parked.Set(1)
	}
}

// sentinel is what a parking's cleanup is attached to: unreachable from
// the start, it is found so by the next collection. (A pointer field keeps
// it out of the tiny allocator, whose blocks are shared and freed late.)
type sentinel struct{ _ *int }

// unpark restores GOGC and the memory limit, if parked.
func (c *Collector) unpark() {
	if !c.parked {
		return
	}
	debug.SetGCPercent(c.percent)
	debug.SetMemoryLimit(c.limit)
	c.parked = false
	if c.cfg.Parked != nil {
		c.cfg.Parked.Set(0)
	}
}

// CollectIfDue collects now if the heap is due (Due), and reports
// whether it did: for a caller that knows a quiet moment of its own (the
// load tool, between two updates).
func (c *Collector) CollectIfDue() bool {
	if !c.Due(c.heap()) {
		return false
	}
	c.gc()
	if c.cfg.Collections != nil {
		c.cfg.Collections.Inc()
	}
	return true
}

// waitQuiet waits until no stream has been busy for Quiet, looking every
// quarter of it. It returns false when ctx ended or GiveUp passed first.
func (c *Collector) waitQuiet(ctx context.Context) bool {
	tick := time.NewTicker(c.cfg.Quiet / 4)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case now := <-tick.C:
			if now.Sub(start) >= c.cfg.Quiet && c.cfg.Busy.idleFor(c.cfg.Quiet, now) {
				return true
			}
			if now.Sub(start) >= c.cfg.GiveUp {
				return false
			}
		case <-ctx.Done():
			return false
		}
	}
}

var heapMetrics = []string{"/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

func readHeap() Heap {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, n := range heapMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	return Heap{Live: s[0].Value.Uint64(), Goal: s[1].Value.Uint64(), InUse: s[2].Value.Uint64(),
		Total: s[3].Value.Uint64() - s[4].Value.Uint64()}
}
