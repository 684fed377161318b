package xdstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/legation-io/legation/internal/testkit/testbase"
)

// LogBuffer is a goroutine-safe buffer for a test's logs:
// testbase.LockedBuffer.
type LogBuffer = testbase.LockedBuffer

// CounterSum returns the sum of the samples of counter name on reg whose
// labels include each pair of labels (name, value, name, value...); 0
// when there is none.
func CounterSum(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	sum := 0.0
	for _, m := range matching(tb, reg, name, labels) {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// GaugeSum is CounterSum for gauges.
func GaugeSum(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	sum := 0.0
	for _, m := range matching(tb, reg, name, labels) {
		sum += m.GetGauge().GetValue()
	}
	return sum
}

// HistogramCount returns the observation count and sum of histogram name
// on reg, over the series whose labels include each pair of labels (as
// CounterSum); 0 when there is none.
func HistogramCount(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) (count uint64, sum float64) {
	tb.Helper()
	for _, m := range matching(tb, reg, name, labels) {
		count += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// matching gathers reg and returns the series of metric name whose labels
// include each pair of labels.
func matching(tb testing.TB, reg prometheus.Gatherer, name string, labels []string) []*dto.Metric {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out
}
