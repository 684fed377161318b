package xdsstream

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the metrics every xDS server has, named
// legation_<protocol>_<name>. The protocol packages add their own.
type Metrics struct {
	Streams         prometheus.Gauge
	Responses       *prometheus.CounterVec // by type
	ResourcesSent   *prometheus.CounterVec // by type
	Nacks           *prometheus.CounterVec // by type
	BytesSent       prometheus.Counter
	Encodes         prometheus.Counter
	StaleNonces     prometheus.Counter
	BadRequests     prometheus.Counter
	Catchups        prometheus.Counter
	CatchupFailures prometheus.Counter
	Heartbeats      *prometheus.CounterVec // by type
	TTLResources    prometheus.Gauge
	Denied          prometheus.Counter
	// LimitHits counts streams ended, polls refused (or NACK messages
	// cut) by a bound, by limit: first_request, names, name_length,
	// node_id_length, node_id_text, subscribed_bytes, subscribed_bytes_conn,
	// initial_resource_versions, nack_message,
	// send_timeout, and vhds_groups (delta).
	LimitHits *prometheus.CounterVec
	// KeysWithheld counts resources carrying an inline private key left
	// out of responses to clients not allowed secrets, by type.
	KeysWithheld *prometheus.CounterVec
	// ResourceErrors counts per-resource errors sent (resource_errors):
	// names subscribed explicitly and not sent, by type and code
	// (NOT_FOUND, PERMISSION_DENIED).
	ResourceErrors *prometheus.CounterVec
}

func newMetrics(p Protocol, reg prometheus.Registerer) *Metrics {
	name := func(n string) string { return "legation_" + p.Name + "_" + n }
	m := &Metrics{
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: name("streams"), Help: "Open " + p.Title + " streams (ADS and per-type)."}),
		Responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("responses_total"), Help: "Responses sent on " + p.Title + " streams, by type."}, []string{"type"}),
		ResourcesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("resources_sent_total"), Help: "Resources sent in " + p.Title + " responses, by type."}, []string{"type"}),
		Nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("nacks_total"), Help: "Responses rejected by " + p.Title + " clients (NACKs), by type; each rejected response counts once."}, []string{"type"}),
		BytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("sent_bytes_total"), Help: "Bytes of " + p.Title + " responses sent."}),
		Encodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("response_encodes_total"), Help: "Response bodies encoded for " + p.Title + " streams; each is shared by every stream sending the same."}),
		StaleNonces: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("stale_nonce_requests_total"), Help: "Requests answering a response that is not the latest, ignored as ACK or NACK."}),
		BadRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("bad_requests_total"), Help: "Streams (" + p.Title + ") ended for a malformed request."}),
		Catchups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("catchup_waits_total"), Help: "Requests presenting a version newer than the view, waited for."}),
		CatchupFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("catchup_failures_total"), Help: "Requests ended with UNAVAILABLE because the view did not catch up in time."}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("ttl_heartbeats_total"), Help: "TTL heartbeats sent to " + p.Title + " clients after a lease extension, by type."}, []string{"type"}),
		TTLResources: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: name("ttl_resources"), Help: "TTL'd resources held with their TTL by " + p.Title + " clients, summed over streams."}),
		Denied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("denied_total"), Help: p.Title + " streams and polls refused by authorization: a node, group or secret the client may not claim, or a rule revoked."}),
		LimitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("limit_hits_total"), Help: "Bounds hit on " + p.Title + " streams and polls, by limit: streams ended or polls refused (first_request, names, name_length, node_id_length, node_id_text, subscribed_bytes, subscribed_bytes_conn, initial_resource_versions, send_timeout, vhds_groups) or NACK messages cut (nack_message)."}, []string{"limit"}),
		KeysWithheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("inline_keys_withheld_total"), Help: "Resources other than secrets carrying an inline private key, left out of " + p.Title + " responses and polls to clients not allowed secrets, by type."}, []string{"type"}),
		ResourceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("resource_errors_total"), Help: "Per-resource errors (resource_errors) sent on " + p.Title + " streams: names subscribed explicitly and not sent, by type and code (NOT_FOUND, PERMISSION_DENIED)."}, []string{"type", "code"}),
	}
	if reg != nil {
		reg.MustRegister(m.Streams, m.Responses, m.ResourcesSent, m.Nacks, m.BytesSent, m.Encodes,
			m.StaleNonces, m.BadRequests, m.Catchups, m.CatchupFailures, m.Heartbeats, m.TTLResources, m.Denied, m.LimitHits, m.KeysWithheld,
			m.ResourceErrors)
	}
	return m
}
