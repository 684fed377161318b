package view

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	revision   prometheus.Gauge
	resources  prometheus.Gauge
	events     prometheus.Counter
	snapshots  prometheus.Counter
	reloads    prometheus.Counter
	malformed  prometheus.Counter
	skipped    prometheus.Gauge
	unserved   prometheus.Gauge
	watchLosts prometheus.Counter
	stalls     prometheus.Counter
	resets     prometheus.Counter
	resetHeld  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, in *interests, heard func() time.Time) *metrics {
	m := &metrics{
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
		unserved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_view_unserved_keys", Help: "Keys currently skipped because their xdstp name's authority is not one the replica serves (--authority)."}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_watch_stalls_total", Help: "Watches restarted because etcd sent nothing, not even progress, for the stall timeout."}),
		watchLosts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_watch_restarts_total", Help: "Times the view's etcd watch ended and was started again."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_view_revision_resets_total", Help: "Times etcd's revision was found behind the view's (etcd restored from an older snapshot without --bump-revision)."}),
		resetHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_view_revision_reset", Help: "1 while etcd's revision is behind the view's and the view serves its last snapshot, else 0."}),
	}
	wakes := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "legation_view_stream_wakes_total",
		Help: "Times the view woke an xDS stream for a change it can see (its scope or the default one, a type it holds or asks for)."},
		func() float64 { return float64(in.wakes.Load()) })
	catchUps := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "legation_view_stream_catchups_total",
		Help: "Times the view woke an xDS stream that no change concerned, so that it lets go of the snapshots published since it last advanced (at most every 10s, and only while changes are published)."},
		func() float64 { return float64(in.catchUps.Load()) })
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "legation_view_etcd_lag_seconds",
		Help: "Seconds since the view last heard from etcd (a watch response or progress notification, asked for when etcd is quiet); it grows while the view is cut off from etcd or its watch stalls; 0 before the first load."},
		func() float64 {
			if h := heard(); !h.IsZero() {
				return time.Since(h).Seconds()
			}
			return 0
		})
	if reg != nil {
		reg.MustRegister(lag)
		reg.MustRegister(m.revision, m.resources, m.events, m.snapshots, m.reloads, m.malformed, m.skipped, m.unserved, m.watchLosts, m.stalls, m.resets, m.resetHeld, wakes, catchUps)
	}
	return m
}
