package xdsstream

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func histogram(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestPushTracker: a revision's push time runs from when the view saw it
// to its latest send, observed once, when a newer revision's first send
// arrives; sends of an older revision than the one being pushed count
// for nothing.
func TestPushTracker(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: pushBuckets})
	var p pushTracker
	const ms = int64(1e6)
	p.sent(5, 100*ms, 200*ms, h)
	p.sent(5, 100*ms, 350*ms, h)
	p.sent(5, 100*ms, 300*ms, h) // an earlier send reported late
	p.sent(4, 90*ms, 900*ms, h)  // a late stream, older revision
	if n, _ := histogram(t, h); n != 0 {
		t.Fatalf("%d observations while revision 5 is being pushed, want 0", n)
	}
	p.sent(6, 500*ms, 600*ms, h)
	if n, sum := histogram(t, h); n != 1 || sum != 0.25 {
		t.Fatalf("after revision 6's first send: %d observations summing %gs, want 1 of 0.25s (350ms - 100ms)", n, sum)
	}
	p.sent(7, 700*ms, 650*ms, h) // a send stamped before the view saw it (clocks): 0, never negative
	p.sent(8, 800*ms, 800*ms, h)
	if n, sum := histogram(t, h); n != 3 || sum != 0.25+0.1 {
		t.Fatalf("after revisions 7 and 8: %d observations summing %gs, want 3 summing 0.35s", n, sum)
	}
}

// TestPushTrackerConcurrent: many streams sending at once (run with
// -race) yield one observation per revision superseded.
func TestPushTrackerConcurrent(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: pushBuckets})
	var p pushTracker
	const revs, streams = 50, 8
	for rev := int64(1); rev <= revs; rev++ {
		var wg sync.WaitGroup
		for s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.sent(rev, rev*1000, rev*1000+int64(s), h)
			}()
		}
		wg.Wait()
	}
	if n, _ := histogram(t, h); n != revs-1 {
		t.Fatalf("%d observations, want %d", n, revs-1)
	}
	if got := p.last.Load(); got != revs*1000+streams-1 {
		t.Fatalf("last send of the revision being pushed = %d, want %d", got, revs*1000+streams-1)
	}
}
