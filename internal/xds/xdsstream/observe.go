package xdsstream

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/xds/limits"
)

// The histograms every protocol shares, one family each, labelled by
// protocol (sotw, delta, rest) and type: a bounded label set (3 x 9).
const (
	ConvergenceMetric  = "legation_xds_convergence_seconds"
	PushMetric         = "legation_xds_push_seconds"
	ResponseSizeMetric = "legation_xds_response_size_bytes"
)

var (
	// convergenceBuckets span the design's targets (p99 0.3 s delta and
	// 0.5 s SotW at 10,000 streams) with room both sides, up to a stream
	// that takes a minute (a stuck client is cut by --send-timeout).
	convergenceBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// pushBuckets: from one stream's send (about a millisecond) to a push
	// to 10,000 streams (a few hundred) and a stalled one.
	pushBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// sizeBuckets: x4 from 128 B (one endpoint set) to 32 MiB (beyond
	// gRPC's default 4 MiB receive limit of clients).
	sizeBuckets = prometheus.ExponentialBuckets(128, 4, 10)
)

// Shared holds the histogram families all protocols of a replica share.
// The first server registered on a Registerer makes them; the next ones
// get the same (SharedMetrics).
type Shared struct {
	Convergence  *prometheus.HistogramVec // protocol, type
	Push         *prometheus.HistogramVec // protocol, type
	ResponseSize *prometheus.HistogramVec // protocol, type
}

// SharedMetrics returns the shared families on reg, registering them on
// first use (nil reg: unregistered ones).
func SharedMetrics(reg prometheus.Registerer) (*Shared, error) {
	s := &Shared{
		Convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ConvergenceMetric,
			Help:    "Seconds from a change's commit (the writer's written_at, else when the view received it) to a client's ACK of the response carrying it, by protocol and type.",
			Buckets: convergenceBuckets,
		}, []string{"protocol", "type"}),
		Push: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    PushMetric,
			Help:    "Seconds from the view receiving a change to this replica's last send of it, by protocol and type; observed when the next change of the type starts going out.",
			Buckets: pushBuckets,
		}, []string{"protocol", "type"}),
		ResponseSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ResponseSizeMetric,
			Help:    "Bytes of each response sent (SotW and delta: each send on a stream; rest: each REST-JSON 200 body), by protocol and type.",
			Buckets: sizeBuckets,
		}, []string{"protocol", "type"}),
	}
	if reg == nil {
		return s, nil
	}
	var err error
	if s.Convergence, err = limits.RegisterOrGet(reg, s.Convergence); err != nil {
		return nil, fmt.Errorf("xdsstream: %w", err)
	}
	if s.Push, err = limits.RegisterOrGet(reg, s.Push); err != nil {
		return nil, fmt.Errorf("xdsstream: %w", err)
	}
	if s.ResponseSize, err = limits.RegisterOrGet(reg, s.ResponseSize); err != nil {
		return nil, fmt.Errorf("xdsstream: %w", err)
	}
	return s, nil
}

// typeMetrics are one type's series of a protocol, resolved once so that
// a send looks up no label (an Observe or Inc allocates nothing).
type typeMetrics struct {
	responses   prometheus.Counter
	resources   prometheus.Counter
	convergence prometheus.Observer
	push        prometheus.Observer
	size        prometheus.Observer
	pushes      pushTracker
}

func newTypeMetrics(protocol string, m *Metrics, sh *Shared) []*typeMetrics {
	all := resource.All()
	out := make([]*typeMetrics, len(all))
	for _, t := range all {
		out[t.Order] = &typeMetrics{
			responses:   m.Responses.WithLabelValues(t.Name),
			resources:   m.ResourcesSent.WithLabelValues(t.Name),
			convergence: sh.Convergence.WithLabelValues(protocol, t.Name),
			push:        sh.Push.WithLabelValues(protocol, t.Name),
			size:        sh.ResponseSize.WithLabelValues(protocol, t.Name),
		}
	}
	return out
}

// pushTracker measures, for one protocol and type, the time from the view
// receiving a revision to this replica's last send of it. Streams report
// each send of a change (sent); a revision's figure is observed when the
// first send of a newer one arrives, since no stream can tell it sends
// the last. Sends are many and concurrent: the common case (the revision
// being pushed) is one atomic load and a compare-and-swap at most; the
// mutex is taken once per revision. A stream late with an older revision
// than the one being pushed is not counted (its lateness shows in the
// convergence histogram).
type pushTracker struct {
	rev  atomic.Int64 // revision being pushed
	last atomic.Int64 // unix nanoseconds of its latest send
	mu   sync.Mutex   // guards seen, and the move to a newer revision
	seen int64        // unix nanoseconds the view received rev
}

func (p *pushTracker) sent(rev, seen, now int64, obs prometheus.Observer) {
	if p.rev.Load() != rev {
		p.mu.Lock()
		cur := p.rev.Load()
		if rev > cur {
			if cur != 0 {
				obs.Observe(seconds(p.last.Load() - p.seen))
			}
			p.seen = seen
			p.last.Store(now)
			p.rev.Store(rev)
		}
		p.mu.Unlock()
		if rev != cur {
			return
		}
	}
	for {
		l := p.last.Load()
		if now <= l || p.last.CompareAndSwap(l, now) {
			return
		}
	}
}

func seconds(ns int64) float64 {
	if ns < 0 {
		return 0
	}
	return float64(ns) / float64(time.Second)
}
