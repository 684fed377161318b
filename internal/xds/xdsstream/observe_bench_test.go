package xdsstream

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/state/resource"
)

// BenchmarkSendMetrics measures what a send costs in metrics, from all
// cores at once as in a push: "labels" is the accounting sends had
// before the histograms (two label lookups and the byte counter), "now"
// is Stream.Send's (series resolved once, the byte counter, the response
// size histogram, and for a push the push tracker with its clock read).
// Neither may allocate.
func BenchmarkSendMetrics(b *testing.B) {
	reg := prometheus.NewRegistry()
	m := newMetrics(Protocol{Name: "sotw", Title: "SotW"}, reg)
	sh, err := SharedMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	types := newTypeMetrics("sotw", m, sh)
	t := resource.Endpoint
	b.Run("labels", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Responses.WithLabelValues(t.Name).Inc()
				m.ResourcesSent.WithLabelValues(t.Name).Add(1)
				m.BytesSent.Add(700)
			}
		})
	})
	b.Run("now", func(b *testing.B) {
		b.ReportAllocs()
		seen := time.Now().UnixNano()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tm := types[t.Order]
				tm.responses.Inc()
				tm.resources.Add(1)
				m.BytesSent.Add(700)
				tm.size.Observe(700)
				tm.pushes.sent(7, seen, time.Now().UnixNano(), tm.push)
			}
		})
	})
}
