package lease

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	tracked       prometheus.Gauge
	queries       prometheus.Counter
	queryErrors   prometheus.Counter
	checks        prometheus.Counter
	checksDropped prometheus.Counter
	extensions    prometheus.Counter
	badMarkers    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_lease_tracked", Help: "etcd leases of TTL'd resources the replica tracks.",
		}),
		queries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lease_queries_total", Help: "Lease TimeToLive queries sent to etcd.",
		}),
		queryErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lease_query_errors_total", Help: "Lease TimeToLive queries that failed.",
		}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lease_checks_total", Help: "Checks before expiry of whether a lease was extended.",
		}),
		checksDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lease_checks_dropped_total", Help: "Checks before expiry dropped because the tracker was behind.",
		}),
		extensions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lease_extensions_total", Help: "Lease extensions announced to streams (each one heartbeats the lease's resources).",
		}),
		badMarkers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lease_malformed_markers_total", Help: "Lease refresh markers skipped because they do not decode.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.tracked, m.queries, m.queryErrors, m.checks, m.checksDropped, m.extensions, m.badMarkers)
	}
	return m
}
