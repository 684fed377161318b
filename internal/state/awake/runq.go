package awake

import (
	"math"
	rtmetrics "runtime/metrics"
	"time"
)

// schedLatencies is the runtime's histogram of how long goroutines
// waited, runnable, for a CPU: the delay a goroutine woken by the
// network (an etcd watch response, a gossip packet) meets before it
// runs. A timer's goroutine skips that queue (the runtime runs it next),
// so the Clock's own ticks arrive on time in a process saturated by
// many runnable goroutines: this is how the Clock sees that starvation.
const schedLatencies = "/sched/latencies:seconds"

// runQueue follows schedLatencies from one look of the Clock to the
// next. Used by the Clock's Run goroutine only.
type runQueue struct {
	sample []rtmetrics.Sample
	prev   []uint64 // bucket counts at the last look; nil before the first
	spare  []uint64 // the buffer the next look's counts are copied into
}

func newRunQueue() *runQueue {
	return &runQueue{sample: []rtmetrics.Sample{{Name: schedLatencies}}}
}

// quantile is the share of the goroutines run since the last look whose
// wait counts: the delay that all but 1 % of them waited at most.
const quantile = 0.99

// delay returns how long the goroutines that ran since the last look
// waited for a CPU, at the 99th percentile (the upper bound of its
// bucket, capped at one minute); 0 on the first look or when the
// runtime does not have the metric.
func (q *runQueue) delay() time.Duration {
	rtmetrics.Read(q.sample)
	if q.sample[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return 0
	}
	h := q.sample[0].Value.Float64Histogram()
	prev := q.prev
	if len(prev) != len(h.Counts) {
		prev = nil
	}
	// The runtime may reuse h's memory at the next read: keep a copy.
	q.prev, q.spare = append(q.spare[:0], h.Counts...), prev
	if prev == nil {
		return 0
	}
	var total uint64
	for i, c := range h.Counts {
		total += c - prev[i]
	}
	if total == 0 {
		return 0
	}
	// The bucket where the quantile falls, counting from the top.
	above := uint64(math.Floor(float64(total) * (1 - quantile)))
	var seen uint64
	for i := len(h.Counts) - 1; i >= 0; i-- {
		seen += h.Counts[i] - prev[i]
		if seen > above {
			upper := h.Buckets[i+1] // bucket i is [Buckets[i], Buckets[i+1])
			if math.IsInf(upper, 1) || upper > 60 {
				upper = 60
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}
