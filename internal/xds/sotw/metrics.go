package sotw

import "github.com/prometheus/client_golang/prometheus"

// metrics are the SotW server's own metrics, beside the common ones of
// package xdsstream (legation_sotw_*).
type metrics struct {
	noResend prometheus.Counter
	mbbHolds prometheus.Counter
	// restEncodes counts REST-JSON bodies encoded: a poll answered from
	// the cache encodes none.
	restEncodes prometheus.Counter
	// restCacheBytes is the bytes of the REST-JSON cache's keys and
	// bodies.
	restCacheBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		noResend: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_resends_avoided_total", Help: "New subscriptions presenting a current version, answered with nothing."}),
		mbbHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_mbb_holds_total", Help: "CDS responses that kept removed clusters until listeners and routes were ACKed."}),
		restEncodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_rest_encodes_total", Help: "REST-JSON response bodies encoded; a poll at an unchanged revision is answered from the cache."}),
		restCacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_sotw_rest_cache_bytes", Help: "Bytes of the REST-JSON body cache: bodies and their keys (which name every name a poll asked for), bounded at 64 MiB."}),
	}
	if reg != nil {
		reg.MustRegister(m.noResend, m.mbbHolds, m.restEncodes, m.restCacheBytes)
	}
	return m
}
