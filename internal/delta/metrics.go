package delta

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	streams         prometheus.Gauge
	responses       *prometheus.CounterVec
	resourcesSent   *prometheus.CounterVec
	removalsSent    *prometheus.CounterVec
	nacks           *prometheus.CounterVec
	bytesSent       prometheus.Counter
	encodes         prometheus.Counter
	staleNonces     prometheus.Counter
	badRequests     prometheus.Counter
	notResent       prometheus.Counter
	catchups        prometheus.Counter
	catchupFailures prometheus.Counter
	heartbeats      *prometheus.CounterVec
	ttlResources    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_delta_streams", Help: "Open delta streams (ADS and per-type)."}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_delta_responses_total", Help: "Delta responses sent, by type."}, []string{"type"}),
		resourcesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_delta_resources_sent_total", Help: "Resources sent in delta responses, by type."}, []string{"type"}),
		removalsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_delta_removals_sent_total", Help: "Names sent in removed_resources, by type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_delta_nacks_total", Help: "Delta responses rejected by clients, by type."}, []string{"type"}),
		bytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_sent_bytes_total", Help: "Bytes of delta responses sent."}),
		encodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_response_encodes_total", Help: "Delta response bodies encoded; shared by every stream sending the same."}),
		staleNonces: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_stale_nonce_requests_total", Help: "ACKs or NACKs of a response that is not the outstanding one, ignored."}),
		badRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_bad_requests_total", Help: "Delta streams ended for a malformed request."}),
		notResent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_resources_not_resent_total", Help: "Resources a client presented at the current version in initial_resource_versions, not resent."}),
		catchups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_catchup_waits_total", Help: "Streams presenting versions newer than the view, waited for."}),
		catchupFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_delta_catchup_failures_total", Help: "Streams ended with UNAVAILABLE because the view did not catch up in time."}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_delta_ttl_heartbeats_total", Help: "Delta TTL heartbeats sent after a lease extension, by type."}, []string{"type"}),
		ttlResources: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_delta_ttl_resources", Help: "TTL'd resources held with their TTL by delta clients, summed over streams."}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.responses, m.resourcesSent, m.removalsSent, m.nacks, m.bytesSent, m.encodes,
			m.staleNonces, m.badRequests, m.notResent, m.catchups, m.catchupFailures, m.heartbeats, m.ttlResources)
	}
	return m
}
