package lrs

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherLabel is the cluster label of the clusters beyond
// Config.MaxClusterLabels.
const OtherLabel = "other"

type metrics struct {
	requests      *prometheus.CounterVec // cluster, outcome
	dropped       *prometheus.CounterVec // cluster
	rejected      *prometheus.CounterVec // reason
	reports       prometheus.Counter
	streams       prometheus.Gauge
	published     prometheus.Counter
	publishErrors prometheus.Counter
	windowsLost   prometheus.Counter

	maxLabels int
	mu        sync.Mutex          // guards labels
	labels    map[string]struct{} // the cluster label values in use
}

// rejectReasons are the reasons of legation_lrs_rejected_total, made at
// zero so that an alert on any of them has a series to watch.
var rejectReasons = []string{"no_node", "unauthorized", "no_cluster", "bad_interval", "unknown_cluster",
	"too_many_clusters", "too_many_localities", "too_many_categories", "too_many_metrics", "bad_metric",
	"over_rate", "node_rows_folded", "node_id_length", "node_id_text"}

func newMetrics(reg prometheus.Registerer, maxLabels int) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_lrs_requests_total",
			Help: "Requests the nodes served here reported (LRS), by cluster (the first 100 clusters seen by name, the rest \"other\") and outcome: issued, succeeded, errored.",
		}, []string{"cluster", "outcome"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_lrs_dropped_requests_total",
			Help: "Requests the nodes served here reported dropped (LRS total_dropped_requests), by cluster (bounded as legation_lrs_requests_total's).",
		}, []string{"cluster"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "legation_lrs_rejected_total",
			Help: "Parts of load reports skipped, by reason: no_node, node_id_length (over --max-node-id-length), node_id_text (control characters or invalid UTF-8), unauthorized (streams ended); no_cluster, bad_interval, unknown_cluster (cluster stats); too_many_clusters, too_many_localities, too_many_categories, too_many_metrics, bad_metric (entries beyond the bounds or not finite); over_rate (cluster stats refused: the node went over --lrs-max-rate); node_rows_folded (rows of a node beyond --lrs-max-rows-per-node, summed into its own (other) row).",
		}, []string{"reason"}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lrs_reports_total", Help: "Load reports (LoadStatsRequests with cluster stats) received."}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_lrs_streams", Help: "LRS streams served here."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lrs_windows_published_total", Help: "Load windows this replica wrote to etcd."}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lrs_publish_errors_total", Help: "Failed writes of load windows to etcd (retried at the next window)."}),
		windowsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_lrs_windows_lost_total", Help: "Closed load windows dropped unpublished, beyond the windows kept, while etcd could not be written."}),
		maxLabels: maxLabels,
		labels:    map[string]struct{}{},
	}
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.dropped, m.rejected, m.reports, m.streams, m.published, m.publishErrors, m.windowsLost} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("lrs: register metrics: %w", err)
		}
	}
	return m, nil
}

// cluster returns the label value of cluster: itself while fewer than
// maxLabels distinct ones are in use, else OtherLabel.
func (m *metrics) cluster(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.labels[name]; ok {
		return name
	}
	if len(m.labels) >= m.maxLabels || name == OtherLabel {
		return OtherLabel
	}
	m.labels[name] = struct{}{}
	return name
}
