package store

import "github.com/prometheus/client_golang/prometheus"

type viewMetrics struct {
	revision   prometheus.Gauge
	resources  prometheus.Gauge
	events     prometheus.Counter
	snapshots  prometheus.Counter
	reloads    prometheus.Counter
	malformed  prometheus.Counter
	skipped    prometheus.Gauge
	watchLosts prometheus.Counter
	stalls     prometheus.Counter
	resets     prometheus.Counter
	resetHeld  prometheus.Gauge
}

func newViewMetrics(reg prometheus.Registerer) *viewMetrics {
	m := &viewMetrics{
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_view_revision", Help: "The etcd revision of the view's latest snapshot."}),
		resources: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_view_resources", Help: "Resources held by the view."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_events_total", Help: "etcd watch events applied to the view."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_snapshots_total", Help: "Snapshots published by the view."}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_reloads_total", Help: "Full reloads of the view (start-up, compaction)."}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_malformed_values_total", Help: "Values found in etcd that did not decode and were skipped."}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_view_malformed_keys", Help: "Keys currently skipped because their values do not decode."}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_watch_stalls_total", Help: "Watches restarted because etcd sent nothing, not even progress, for the stall timeout."}),
		watchLosts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_watch_restarts_total", Help: "Times the view's etcd watch ended and was started again."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_revision_resets_total", Help: "Times etcd's revision was found behind the view's (etcd restored from an older snapshot without --bump-revision)."}),
		resetHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_view_revision_reset", Help: "1 while etcd's revision is behind the view's and the view serves its last snapshot, else 0."}),
	}
	if reg != nil {
		reg.MustRegister(m.revision, m.resources, m.events, m.snapshots, m.reloads, m.malformed, m.skipped, m.watchLosts, m.stalls, m.resets, m.resetHeld)
	}
	return m
}
