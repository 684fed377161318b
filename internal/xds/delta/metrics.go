package delta

import "github.com/prometheus/client_golang/prometheus"

// metrics are the delta server's own metrics, beside the common ones of
// package xdsstream (legation_delta_*).
type metrics struct {
	removalsSent *prometheus.CounterVec
	notResent    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		removalsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_delta_removals_sent_total", Help: "Names sent in removed_resources, by type."}, []string{"type"}),
		notResent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_resources_not_resent_total", Help: "Resources a client presented at the current version in initial_resource_versions, not resent."}),
	}
	if reg != nil {
		reg.MustRegister(m.removalsSent, m.notResent)
	}
	return m
}
