package ads

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	streams         prometheus.Gauge
	responses       *prometheus.CounterVec
	resourcesSent   *prometheus.CounterVec
	nacks           *prometheus.CounterVec
	bytesSent       prometheus.Counter
	encodes         prometheus.Counter
	staleNonces     prometheus.Counter
	badRequests     prometheus.Counter
	noResend        prometheus.Counter
	catchups        prometheus.Counter
	catchupFailures prometheus.Counter
	mbbHolds        prometheus.Counter
	heartbeats      *prometheus.CounterVec
	ttlResources    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_sotw_streams", Help: "Open SotW streams (ADS and per-type)."}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_sotw_responses_total", Help: "SotW responses sent, by type."}, []string{"type"}),
		resourcesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_sotw_resources_sent_total", Help: "Resources sent in SotW responses, by type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_sotw_nacks_total", Help: "SotW responses rejected by clients, by type."}, []string{"type"}),
		bytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_sent_bytes_total", Help: "Bytes of SotW responses sent."}),
		encodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_response_encodes_total", Help: "Response bodies encoded; shared by every stream sending the same."}),
		staleNonces: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_stale_nonce_requests_total", Help: "Requests ignored for a stale nonce."}),
		badRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_bad_requests_total", Help: "Streams ended for a malformed request."}),
		noResend: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_resends_avoided_total", Help: "New subscriptions presenting a current version, answered with nothing."}),
		catchups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_catchup_waits_total", Help: "Requests presenting a version newer than the view, waited for."}),
		catchupFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_catchup_failures_total", Help: "Requests ended with UNAVAILABLE because the view did not catch up in time."}),
		mbbHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_sotw_mbb_holds_total", Help: "CDS responses that kept removed clusters until listeners and routes were ACKed."}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_sotw_ttl_heartbeats_total", Help: "SotW TTL heartbeats sent after a lease extension, by type."}, []string{"type"}),
		ttlResources: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_sotw_ttl_resources", Help: "TTL'd resources held with their TTL by SotW clients, summed over streams."}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.responses, m.resourcesSent, m.nacks, m.bytesSent, m.encodes,
			m.staleNonces, m.badRequests, m.noResend, m.catchups, m.catchupFailures, m.mbbHolds, m.heartbeats, m.ttlResources)
	}
	return m
}
