package xdstest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/view"
)

// The skeleton the fan-out benchmarks share: a Round of responses the
// streams owe, the Mark of the moment the view publishes a change, the
// sums of the measured windows, the one push made with every allocation
// profiled, and the waits for the server's view of the streams.

// Round is the responses a fan-out benchmark's streams owe in one round
// (the initial responses, or those of one push). Each stream's receiving
// goroutine records its responses with Got or its failure with Fail; the
// benchmark's goroutine Starts a round and Waits for it. Its methods may
// be called from any goroutine.
type Round struct {
	pending atomic.Int64  // responses still owed in this round
	bytes   atomic.Int64  // message bytes received in this round
	bad     atomic.Int64  // responses not as wanted, in all rounds
	done    chan struct{} // wakes Wait: the round is complete, or a stream failed

	mu  sync.Mutex // guards err
	err error      // the first stream failure
}

// NewRound returns a Round owing nothing.
func NewRound() *Round { return &Round{done: make(chan struct{}, 1)} }

// Start begins a round of n responses, its byte count at zero.
func (r *Round) Start(n int) {
	r.bytes.Store(0)
	r.pending.Store(int64(n))
}

// Got records a response of size message bytes; good is whether it held
// what the round wants.
func (r *Round) Got(size int, good bool) {
	r.bytes.Add(int64(size))
	if !good {
		r.bad.Add(1)
	}
	if r.pending.Add(-1) == 0 {
		r.wake()
	}
}

// Fail records a stream's failure; the first one fails Wait.
func (r *Round) Fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.wake()
}

func (r *Round) wake() {
	select {
	case r.done <- struct{}{}:
	default: // already woken
	}
}

// Bytes is the message bytes received in this round so far.
func (r *Round) Bytes() int64 { return r.bytes.Load() }

// Wait blocks until every response of the round has come. It fails tb
// after timeout, when a stream failed, or when a response did not hold
// what was wanted (want says what, for the message); what names the
// responses.
func (r *Round) Wait(tb testing.TB, timeout time.Duration, what, want string) {
	tb.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		tb.Fatalf("after %s %d responses with %s are still missing", timeout, r.pending.Load(), what)
	}
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil {
		tb.Fatalf("a stream failed: %v", err)
	}
	if bad := r.bad.Load(); bad > 0 {
		tb.Fatalf("%d responses with %s did not hold %s", bad, what, want)
	}
}

// MarkNextChange starts marking the moment the view publishes the first
// snapshot after s that holds a change: the snapshot that wakes every
// stream. Read the Mark with WaitMark. If ctx ends first, no Mark comes.
func MarkNextChange(ctx context.Context, s *view.Snapshot) <-chan Mark {
	published := make(chan Mark, 1)
	go func() {
		for {
			select {
			case <-s.Done():
			case <-ctx.Done():
				return
			}
			if s = s.Next(); len(s.Changes) > 0 {
				published <- MarkNow()
				return
			}
		}
	}()
	return published
}

// WaitMark returns the Mark of MarkNextChange, failing tb if none comes
// within timeout.
func WaitMark(tb testing.TB, published <-chan Mark, timeout time.Duration) Mark {
	tb.Helper()
	select {
	case m := <-published:
		return m
	case <-time.After(timeout):
		tb.Fatal("the view published no snapshot with the change")
		return Mark{}
	}
}

// PushMetrics sums the measured windows of a benchmark's pushes, each
// from the view publishing the change to the last stream's response.
type PushMetrics struct {
	pushes            int
	total, worst, cpu time.Duration
	allocBytes        uint64
	allocs            uint64
	gcs               uint32
	wire              int64
}

// Add adds the window of one push, from start to end, whose responses
// were wire message bytes in all.
func (m *PushMetrics) Add(start, end Mark, wire int64) {
	d := end.At.Sub(start.At)
	m.pushes++
	m.total += d
	m.worst = max(m.worst, d)
	m.cpu += end.CPU - start.CPU
	m.allocBytes += end.Mem.TotalAlloc - start.Mem.TotalAlloc
	m.allocs += end.Mem.Mallocs - start.Mem.Mallocs
	m.gcs += end.Mem.NumGC - start.Mem.NumGC
	m.wire += wire
}

// Report reports the metrics, each push having gone to streams streams:
// ms-until-all-sent (mean) and max-ms-until-all-sent, wire-B/stream/push,
// alloc-B/stream/push, allocs/stream/push, cpu-us/stream/push and
// gcs/push.
func (m *PushMetrics) Report(b *testing.B, streams int) {
	if m.pushes == 0 {
		return
	}
	pushes, per := float64(m.pushes), float64(m.pushes)*float64(streams)
	b.ReportMetric(m.total.Seconds()*1e3/pushes, "ms-until-all-sent")
	b.ReportMetric(m.worst.Seconds()*1e3, "max-ms-until-all-sent")
	b.ReportMetric(float64(m.wire)/per, "wire-B/stream/push")
	b.ReportMetric(float64(m.allocBytes)/per, "alloc-B/stream/push")
	b.ReportMetric(float64(m.allocs)/per, "allocs/stream/push")
	b.ReportMetric(m.cpu.Seconds()*1e6/per, "cpu-us/stream/push")
	b.ReportMetric(float64(m.gcs)/pushes, "gcs/push")
}

// Attribute runs push with every allocation profiled
// (runtime.MemProfileRate=1), which slows it down (so it is not a timed
// push), and returns what was allocated meanwhile, by owner.
func Attribute(owner OwnerFunc, push func()) map[Owner]AllocSum {
	before := ReadAllocProfile()
	rate := runtime.MemProfileRate
	defer func() { runtime.MemProfileRate = rate }() // also if push fails
	runtime.MemProfileRate = 1
	push()
	runtime.MemProfileRate = rate
	return ReadAllocProfile().Since(before, owner)
}

// WaitAcked polls acked until it counts n streams having ACKed version
// ver, failing tb after timeout.
func WaitAcked(tb testing.TB, timeout time.Duration, n int, ver string, acked func(ver string) int) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := acked(ver)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s the server has taken %d of %d ACKs of version %s", timeout, got, n, ver)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitNoStreams polls open until the server holds no stream, after the
// clients closed theirs; it reports an error (and returns) after timeout.
func WaitNoStreams(tb testing.TB, timeout time.Duration, open func() int) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for open() > 0 {
		if time.Now().After(deadline) {
			tb.Errorf("the server still holds %d streams after the clients closed them", open())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
